"""The jarvis version (one place; `jarvis.__version__` and `Jarvis.version` read it)."""

__version__ = "0.1.0"
