"""Errors raised while reading input: each names the object and the field at fault."""


class InputError(ValueError):
    """Bad input. The message is one line a user can act on."""

    def __init__(self, message: str, *, obj: str | None = None, field: str | None = None):
        self.obj = obj
        self.field = field
        where = ""
        if obj and field:
            where = f"{obj}: {field}: "
        elif obj:
            where = f"{obj}: "
        super().__init__(f"{where}{message}")
