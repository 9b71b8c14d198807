"""Reverse mode: the augmented forward sweep, the reverse sweep, adjoints, control flow."""
