"""GradBench's ``lstm`` eval: the loss of a stacked LSTM predicting a text, and its gradient.

The model (ADBench's) has ``l`` layers of ``b`` cells with diagonal weights: ``main_params``
holds per layer a row of weights and a row of biases, each four gates of ``b`` (forget, input,
output, change), ``extra_params`` the input weights, output weights and output biases, ``state``
per layer a hidden row and a cell row, and ``sequence`` the ``c`` characters of the text as rows
of ``b`` bits. ``objective`` runs the model over the sequence from a copy of ``state``,
predicting each character from the one before, and gives the negative mean over the ``(c - 1)
b`` predicted bits of ``bit * (prediction - log(2 + sum(exp(prediction))))``.

``jacobian`` is the gradient of that loss with respect to ``main_params`` then
``extra_params``, flattened row by row (``8 l b + 3 b`` numbers): one reverse sweep through
:func:`objective`, by ``pyzyme.grad(objective, argnums=(0, 1))`` called from ``@njit`` code.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(1)
>>> l, c, b = 1, 3, 2
>>> input = {"main_params": rng.random((2 * l, 4 * b)).tolist(),
...          "extra_params": rng.random((3, b)).tolist(),
...          "state": rng.random((2 * l, b)).tolist(),
...          "sequence": [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]}
>>> len(FUNCTIONS["jacobian"].evaluate(input)) == 8 * l * b + 3 * b
True
"""

import math

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "jacobian", "objective"]


@numba.njit
def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@numba.njit
def _layer(weight, bias, hidden, cell, input):
    """One LSTM layer's step: ``hidden`` and ``cell`` updated in place from ``input``."""
    b = hidden.shape[0]
    for i in range(b):
        forget = _sigmoid(input[i] * weight[i] + bias[i])
        ingate = _sigmoid(hidden[i] * weight[b + i] + bias[b + i])
        outgate = _sigmoid(input[i] * weight[2 * b + i] + bias[2 * b + i])
        change = math.tanh(hidden[i] * weight[3 * b + i] + bias[3 * b + i])
        cell[i] = cell[i] * forget + ingate * change
        hidden[i] = outgate * math.tanh(cell[i])


@numba.njit
def _predict(main_params, extra_params, state, input, output):
    """The model's prediction for the character after ``input``, into ``output``; the layers'
    states advance."""
    b = input.shape[0]
    for i in range(b):
        output[i] = input[i] * extra_params[0, i]
    layer_input = output
    for j in range(main_params.shape[0] // 2):
        _layer(main_params[2 * j], main_params[2 * j + 1], state[2 * j], state[2 * j + 1],
               layer_input)
        layer_input = state[2 * j]
    for i in range(b):
        output[i] = layer_input[i] * extra_params[1, i] + extra_params[2, i]


@numba.njit
def objective(main_params, extra_params, state, sequence):
    """The model's loss over ``sequence``, starting from (a copy of) ``state``."""
    c, b = sequence.shape
    state = state.copy()
    prediction = np.empty(b)
    total = 0.0
    count = 0
    for t in range(c - 1):
        _predict(main_params, extra_params, state, sequence[t], prediction)
        total_exp = 0.0
        for i in range(b):
            total_exp += math.exp(prediction[i])
        lse = math.log(total_exp + 2.0)
        for i in range(b):
            total += sequence[t + 1, i] * (prediction[i] - lse)
        count += b
    return -total / count


_d_objective = pyzyme.grad(objective, argnums=(0, 1))


@numba.njit
def jacobian(main_params, extra_params, state, sequence):
    """The loss's gradient with respect to ``main_params`` and ``extra_params`` (a pair of
    arrays of their shapes), by reverse mode."""
    return _d_objective(main_params, extra_params, state, sequence)


def _arrays(input):
    return tuple(np.array(input[k], dtype=np.float64)
                 for k in ("main_params", "extra_params", "state", "sequence"))


FUNCTIONS = {
    "objective": Function(_arrays, objective, float, spread=True),
    "jacobian": Function(_arrays, jacobian,
                         lambda d: to_json(np.concatenate([d[0].ravel(), d[1].ravel()])),
                         spread=True),
}
