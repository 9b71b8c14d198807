"""Facts about IR, as pure functions returning result objects that print themselves."""
