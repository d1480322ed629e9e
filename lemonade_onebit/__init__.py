"""lemonade-onebit: the 1bit engine's host side for Lemonade."""

__version__ = "0.1.0"
