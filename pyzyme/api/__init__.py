"""The public API: annotations, modes, autodiff, thunks and the functional transforms.

:mod:`pyzyme.api.args` marshals arguments; :mod:`pyzyme.api.njit` is the same API callable from
``@njit`` code. :mod:`pyzyme.api.plans` keeps the compiled derivatives (built by
:mod:`pyzyme.frontends.numba.derive`), :mod:`pyzyme.api.dispatchers` what pyzyme made of the
user's functions (never stored on them).
"""
