"""What the forward sweep keeps for the reverse sweep: caches and their pooled arrays."""
