"""GradBench's ``lstm`` eval (pyzyme.gradbench.evals.lstm): the loss against a NumPy
transcription of ADBench's model, its gradient by reverse mode against central differences and
forward mode, and the JSON the eval expects (main then extra parameters, row by row)."""

import numpy as np
import pytest

import pyzyme
from pyzyme import Const, Duplicated, Forward
from pyzyme.gradbench.evals import lstm


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_loss(main, extra, state, sequence):
    """GradBench's lstm.hpp, layer by layer on whole rows."""
    l, b = main.shape[0] // 2, sequence.shape[1]
    state = state.copy()
    total = 0.0
    for t in range(len(sequence) - 1):
        x = sequence[t] * extra[0]
        for j in range(l):
            w, bias = main[2 * j].reshape(4, b), main[2 * j + 1].reshape(4, b)
            hidden, cell = state[2 * j], state[2 * j + 1]
            forget = _sigmoid(x * w[0] + bias[0])
            ingate = _sigmoid(hidden * w[1] + bias[1])
            outgate = _sigmoid(x * w[2] + bias[2])
            change = np.tanh(hidden * w[3] + bias[3])
            cell[:] = cell * forget + ingate * change
            hidden[:] = outgate * np.tanh(cell)
            x = hidden
        y = x * extra[1] + extra[2]
        total += np.sum(sequence[t + 1] * (y - np.log(np.sum(np.exp(y)) + 2.0)))
    return -total / ((len(sequence) - 1) * b)


def _input(l, c, b, seed=5):
    rng = np.random.default_rng(seed)
    return {"main_params": rng.random((2 * l, 4 * b)).tolist(),
            "extra_params": rng.random((3, b)).tolist(),
            "state": rng.random((2 * l, b)).tolist(),
            "sequence": rng.integers(0, 2, (c, b)).astype(float).tolist(),
            "min_runs": 1, "min_seconds": 0}


@pytest.mark.parametrize("l, c, b", [(1, 2, 3), (2, 6, 4)])
def test_objective_is_the_specs_model(l, c, b):
    main, extra, state, sequence = lstm.FUNCTIONS["objective"].arguments(_input(l, c, b))
    kept = state.copy()
    got = lstm.objective(main, extra, state, sequence)
    assert got == pytest.approx(_numpy_loss(main, extra, state, sequence), rel=1e-13)
    np.testing.assert_array_equal(state, kept)          # the state is copied, not advanced


def test_jacobian_against_differences_and_forward_mode():
    l, c, b = 2, 5, 3
    main, extra, state, sequence = lstm.FUNCTIONS["jacobian"].arguments(_input(l, c, b))
    d_main, d_extra = lstm.jacobian(main, extra, state, sequence)
    assert d_main.shape == main.shape and d_extra.shape == extra.shape
    got = np.concatenate([d_main.ravel(), d_extra.ravel()])
    assert got.shape == (8 * l * b + 3 * b,)
    flat = np.concatenate([main.ravel(), extra.ravel()])

    def loss(p):
        return lstm.objective(p[:main.size].reshape(main.shape),
                              p[main.size:].reshape(extra.shape), state, sequence)
    h = 1e-6
    central = np.array([(loss(flat + h * e) - loss(flat - h * e)) / (2 * h)
                        for e in np.eye(len(flat))])
    np.testing.assert_allclose(got, central, rtol=1e-6, atol=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(3):
        v = rng.standard_normal(len(flat))
        vm, ve = v[:main.size].reshape(main.shape), v[main.size:].reshape(extra.shape)
        _, jv = pyzyme.autodiff(Forward, lstm.objective, Duplicated, Duplicated(main, vm.copy()),
                                Duplicated(extra, ve.copy()), Const(state), Const(sequence))
        assert jv == pytest.approx(got @ v, rel=1e-11, abs=1e-14)


def test_json_shapes_and_values():
    l, c, b = 1, 4, 3
    input = _input(l, c, b)
    objective = lstm.FUNCTIONS["objective"].evaluate(input)
    jacobian = lstm.FUNCTIONS["jacobian"].evaluate(input)
    main, extra, state, sequence = (np.array(input[k]) for k in
                                    ("main_params", "extra_params", "state", "sequence"))
    assert type(objective) is float
    assert objective == pytest.approx(_numpy_loss(main, extra, state, sequence), rel=1e-13)
    assert isinstance(jacobian, list) and len(jacobian) == 8 * l * b + 3 * b
    assert all(type(v) is float for v in jacobian)
    # entry 4 b + 1 is d loss / d main_params[1][1] (a bias), the last d / d extra_params[2][-1]
    h = 1e-6
    for k, which, i, j in [(4 * b + 1, 0, 1, 1), (len(jacobian) - 1, 1, 2, b - 1)]:
        params = [main.copy(), extra.copy()]
        params[which][i, j] += h
        up = lstm.objective(*params, state, sequence)
        params[which][i, j] -= 2 * h
        down = lstm.objective(*params, state, sequence)
        assert jacobian[k] == pytest.approx((up - down) / (2 * h), rel=1e-6)
    assert lstm.FUNCTIONS["jacobian"].evaluate(input) == jacobian
