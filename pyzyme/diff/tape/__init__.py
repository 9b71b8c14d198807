"""What the forward sweep keeps for the reverse sweep: caches and their pooled arrays, and the
releases deferred until the reverse sweep is done."""
