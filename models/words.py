"""Counts in words, so that no report says "1 zones" or hedges with "shard(s)"."""


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one (``many``: a plural not made with -s)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def verb(n: int, one: str, many: str) -> str:
    """The verb form that agrees with a count of ``n`` ("accepts" / "accept")."""
    return one if n == 1 else many
