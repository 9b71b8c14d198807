"""Forward mode: the tangent generator and shadow memory."""
