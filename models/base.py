"""Shared pydantic configuration: camelCase on the wire, snake_case in code."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Wire(BaseModel):
    """A model read from or written to a user-facing document (policy, plan)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Value(BaseModel):
    """An internal immutable value."""

    model_config = ConfigDict(frozen=True, extra="forbid")
