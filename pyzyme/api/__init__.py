"""The public API: annotations, modes, autodiff, thunks and the functional transforms.

:mod:`pyzyme.api.args` marshals arguments; :mod:`pyzyme.api.njit` is the same API callable from
``@njit`` code.
"""
