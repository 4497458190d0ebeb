"""Counts in words, so that no report says "1 zones" or hedges with "shard(s)"."""

from collections.abc import Sequence


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one (``many``: a plural not made with -s)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def verb(n: int, one: str, many: str) -> str:
    """The verb form that agrees with a count of ``n`` ("accepts" / "accept")."""
    return one if n == 1 else many


def first_few(items: Sequence[str], shown: int) -> str:
    """The first ``shown`` of ``items``, comma-separated, and how many more there are."""
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")
