"""The package version, below every layer so that any module may read it."""

__version__ = "0.1.0"
