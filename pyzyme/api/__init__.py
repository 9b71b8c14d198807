"""The public API: annotations, modes, autodiff, thunks and the functional transforms."""
