"""Derivative code generation: forward mode now, reverse mode in a later issue."""
