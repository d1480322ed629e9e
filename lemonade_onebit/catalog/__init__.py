"""Lemonade catalog entries for the 1bit models, and where their files are on this machine."""

from lemonade_onebit.catalog.entries import CatalogEntry, find_entry, local_file

__all__ = ["CatalogEntry", "find_entry", "local_file"]
