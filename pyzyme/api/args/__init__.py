"""Argument marshalling: call shapes, typeof, pytrees, structured and complex arguments, make_zero."""
