"""JSON in and out, fast where it can be and as the standard library has it where it cannot.

Watch streams are most of what the binder reads, a line per event: orjson decodes them in a
fraction of the standard library's time, and writes a plan of 15,000 assignments ten times
faster. (A whole dump is not decoded here: building its objects is most of the time either
way, and the check below would cost what orjson saves.) What orjson refuses (NaN, lone
surrogates, nesting past its limit) or would read otherwise (an integer beyond 64 bits becomes
a float there) goes to the standard library, so what is accepted and how a refusal is worded
stay as they were.
"""

import json
import re
from typing import Any

import orjson

_LONG_NUMBER = re.compile(r"\d{19}")
_LONG_NUMBER_BYTES = re.compile(rb"\d{19}")
"""Digits enough to leave 64 bits, which orjson would read as a float rather than refuse."""


def loads(text: str | bytes) -> Any:
    """Decode JSON; raises ``json.JSONDecodeError`` (or RecursionError) as ``json.loads`` does."""
    long = _LONG_NUMBER_BYTES if isinstance(text, bytes) else _LONG_NUMBER
    if long.search(text) is None:  # type: ignore[arg-type]
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
