"""Kubernetes resource quantities, parsed exactly (no floats)."""

import math
import re
from fractions import Fraction
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity such as ``500m``, ``1.5``, ``2Gi``, ``1e9`` or ``129M``."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a quantity: {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """Cached: a cluster repeats a handful of quantity strings across thousands of pods."""
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {value!r}")
    number = Fraction(match["num"])
    if match["sign"] == "-":
        number = -number
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"]:
        exponent = int(match["exp"][1:])
        return number * (Fraction(10) ** exponent)
    return number * _DECIMAL[match["dec"] or ""]


def cpu_millis(value: object) -> int:
    """CPU in millicores, rounded up as the kubelet does."""
    return math.ceil(parse_quantity(value) * 1000)


def memory_bytes(value: object) -> int:
    """Memory (or any count) in whole units, rounded up."""
    return math.ceil(parse_quantity(value))
