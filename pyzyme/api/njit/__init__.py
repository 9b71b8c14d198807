"""The public API callable from @njit code: overloads, annotations, tapes, thunks."""
