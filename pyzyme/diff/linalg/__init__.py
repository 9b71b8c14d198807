"""BLAS and LAPACK derivatives."""
