"""Kubernetes resource quantities, parsed exactly (no floats) and exactly as strictly as Kubernetes.

The grammar is apimachinery's (``k8s.io/apimachinery/pkg/api/resource``)::

    quantity ::= [+-] number suffix
    number   ::= digits | digits "." digits | digits "." | "." digits     (ASCII digits only)
    suffix   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | "" | k | M | G | T | P | E
               | (e | E) [+-] digits

No spaces anywhere: the API server rejects ``" 1Gi"`` and ``"1Gi "``. It also caps every
quantity at 2^63-1 base units and prints the capped value back, so a larger number in a dump was
never read from a cluster: such values are rejected here, never handed to the solver.
"""

import math
import re
from fractions import Fraction
from functools import lru_cache

INT64_MAX = 2**63 - 1
"""The largest quantity Kubernetes holds, in base units (bytes, cores, pods)."""

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))",
    re.ASCII,
)
_SIGNIFICANT = 40
"""Digits kept: any quantity Kubernetes holds needs far fewer (the rest only rounds up)."""
_TINY = Fraction(1, 10**30)
"""What a positive quantity below 10^-30 counts as: Kubernetes rounds it up to its smallest unit."""


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity, or one larger than Kubernetes can hold."""


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity such as ``500m``, ``1.5``, ``2Gi``, ``1e9`` or ``129M``."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return _within_range(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a quantity: {value!r}")
        return _within_range(Fraction(str(value)), value)
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    return _parse_text(value)


def _within_range(amount: Fraction, shown: object) -> Fraction:
    if abs(amount) > INT64_MAX:
        raise QuantityError(_too_large(shown))
    return amount


def _too_large(shown: object) -> str:
    return f"{shown!r} is larger than Kubernetes can hold (at most {INT64_MAX}, 2^63-1)"


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """Cached: a cluster repeats a handful of quantity strings across thousands of pods."""
    if value != value.strip():
        raise QuantityError(f"not a quantity: {value!r} (Kubernetes allows no spaces)")
    match = _QUANTITY.fullmatch(value)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(f"not a quantity: {value!r}")
    digits = match["int"] + (match["frac"] or "")
    exponent = -len(match["frac"] or "")
    power_of_two = 0
    if match["bin"]:
        power_of_two = _BINARY[match["bin"]]
    elif match["exp"] is not None:
        exponent += int(match["exp"])
    else:
        exponent += _DECIMAL[match["dec"]]
    amount = _decimal(digits, exponent, value) * 2**power_of_two
    if match["sign"] == "-":
        amount = -amount
    return _within_range(amount, value)


def _decimal(digits: str, exponent: int, shown: str) -> Fraction:
    """``int(digits) * 10**exponent`` without building huge numbers for absurd inputs.

    Only the leading significant digits are kept (a cut rounds up, as Kubernetes rounds up), and
    the order of magnitude is checked before any power is computed.
    """
    significant = digits.lstrip("0")
    trailing_zeros = len(significant) - len(significant.rstrip("0"))
    significant = significant.rstrip("0")
    exponent += trailing_zeros
    if not significant:
        return Fraction(0)
    if len(significant) > _SIGNIFICANT:
        exponent += len(significant) - _SIGNIFICANT
        significant = str(int(significant[:_SIGNIFICANT]) + 1)
    magnitude = len(significant) - 1 + exponent
    if magnitude >= 19:  # >= 10^19 before any binary suffix: beyond 2^63-1 whatever follows
        raise QuantityError(_too_large(shown))
    if magnitude < -30:
        return _TINY
    return Fraction(int(significant)) * Fraction(10) ** exponent


def non_negative(value: object) -> Fraction:
    """A quantity that may be a request or a capacity: the API server accepts no negative one,
    so a negative value was never read from a cluster (or meant on a command line)."""
    amount = parse_quantity(value)
    if amount < 0:
        raise QuantityError(f"{value!r} is negative: Kubernetes accepts no negative quantity")
    return amount


def cpu_millis(value: object) -> int:
    """CPU in millicores, rounded up as the kubelet does; at most 2^63-1 millicores."""
    millis = math.ceil(parse_quantity(value) * 1000)
    if abs(millis) > INT64_MAX:
        raise QuantityError(
            f"{value!r} is larger than Kubernetes can hold as cpu (at most {INT64_MAX} millicores)"
        )
    return millis


def memory_bytes(value: object) -> int:
    """Memory (or any count) in whole units, rounded up."""
    return math.ceil(parse_quantity(value))


def whole_count(value: object) -> int:
    """A count Kubernetes keeps as an integer (``pods``): a fraction is an error, not rounded."""
    amount = parse_quantity(value)
    if amount.denominator != 1:
        raise QuantityError(f"{value!r} is not a whole number")
    return int(amount)
