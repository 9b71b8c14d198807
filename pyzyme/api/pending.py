"""Public names whose implementation needs reverse mode (a later issue).

They exist so that ``from pyzyme import ...`` of the whole API works today; each raises
:class:`~pyzyme.UnsupportedError` saying so, rather than returning anything.
"""

from __future__ import annotations

from pyzyme.errors import UnsupportedError

__all__ = ["autodiff_thunk", "hvp", "grad", "value_and_grad", "vjp", "jacrev", "hessian"]


def _needs_reverse(name: str):
    def pending(*args, **kwargs):
        raise UnsupportedError(f"pyzyme.{name} needs reverse mode, which is not implemented yet",
                               hint="forward mode works today: autodiff(Forward, ...), "
                                    "gradient(Forward, ...), jacobian(Forward, ...), jvp, jacfwd")
    pending.__name__ = name
    pending.__doc__ = f"Not available yet: {name} needs reverse mode."
    return pending


autodiff_thunk = _needs_reverse("autodiff_thunk")
hvp = _needs_reverse("hvp")
grad = _needs_reverse("grad")
value_and_grad = _needs_reverse("value_and_grad")
vjp = _needs_reverse("vjp")
jacrev = _needs_reverse("jacrev")
hessian = _needs_reverse("hessian")
