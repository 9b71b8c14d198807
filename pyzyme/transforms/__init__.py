"""IR rewrites that compute no derivative (run before or during differentiation)."""
