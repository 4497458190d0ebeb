"""Tests; a package so helpers import as ``tests.<module>`` under pytest and mypy alike."""
