"""Shared pydantic configuration: camelCase on the wire, snake_case in code."""

from collections.abc import Mapping
from functools import cache, cached_property
from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


@cache
def _cached_names(cls: type) -> tuple[str, ...]:
    return tuple(n for n in dir(cls) if isinstance(getattr(cls, n, None), cached_property))


class _Immutable(BaseModel):
    """Frozen models whose ``cached_property`` values never outlive the fields they came from."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        # pydantic copies the instance __dict__, where cached_property keeps its values: a
        # copy with new fields would otherwise answer from the old ones.
        copied = super().model_copy(update=update, deep=deep)
        for name in _cached_names(type(self)):
            copied.__dict__.pop(name, None)
        return copied


class Wire(_Immutable):
    """A model read from or written to a user-facing document (policy, plan)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Value(_Immutable):
    """An internal immutable value."""

    model_config = ConfigDict(frozen=True, extra="forbid")
