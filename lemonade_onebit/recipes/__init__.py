"""Tuned executor settings as data, with their evidence, and the matcher that applies them.

No recipe ships yet: a recipe lands here only with the measurement that earns it its place.
"""
