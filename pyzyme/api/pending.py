"""Public names not implemented yet: split reverse mode and forward-over-reverse.

They exist so that ``from pyzyme import ...`` of the whole API works today; each raises
:class:`~pyzyme.UnsupportedError` saying so, rather than returning anything.
"""

from __future__ import annotations

from pyzyme.errors import UnsupportedError

__all__ = ["autodiff_thunk"]


def _pending(name: str, needs: str, hint: str):
    def pending(*args, **kwargs):
        raise UnsupportedError(f"pyzyme.{name} needs {needs}, which is not implemented yet",
                               hint=hint)
    pending.__name__ = name
    pending.__doc__ = f"Not available yet: {name} needs {needs}."
    return pending


autodiff_thunk = _pending("autodiff_thunk", "split reverse mode",
                          "combined reverse mode works: autodiff(Reverse, ...)")
