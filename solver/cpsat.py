"""OR-tools' ``cp_model``, imported without importing pandas.

``cp_model`` imports pandas at module level for its pandas helpers (``new_int_var_series`` and
the like), which this project never calls; pandas is then about 0.1 s of every command's start
on a 2-core machine (docs/benchmarks.md, issue 18's eighth pass). So while
``cp_model`` is imported, ``pandas`` stands for a placeholder that holds the two names
``cp_model`` reads at import (the classes of its type alias), and afterwards its ``pd`` is a
proxy that imports the real pandas the first time anything in it is touched: its pandas helpers
work as before, on real pandas objects, and a process that has imported pandas already gets the
plain import. Every module of the solver takes ``cp_model`` from here, at import time: the
placeholder stands only while ``cp_model`` and what it imports (numpy, OR-tools' extension
modules, none of which reads pandas) are loaded, before any thread of the binder starts.
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any


class _PandasOnFirstUse(types.ModuleType):
    """``pandas``, imported when an attribute is first read."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_real_pandas(), name)


def _real_pandas() -> types.ModuleType:
    """The real pandas, even while the placeholder stands in ``sys.modules``."""
    if isinstance(sys.modules.get("pandas"), _PandasOnFirstUse):
        del sys.modules["pandas"]
    return importlib.import_module("pandas")


class _PandasAtImport(_PandasOnFirstUse):
    """What ``cp_model``'s module body reads of pandas: two classes no object is an instance
    of (only its type alias of pandas' index and series holds them). Anything else it might
    read in another version is the real thing."""

    class Index:
        pass

    class Series:
        pass


def _import_cp_model() -> types.ModuleType:
    if "pandas" in sys.modules or "ortools.sat.python.cp_model" in sys.modules:
        from ortools.sat.python import cp_model as plain

        return plain
    sys.modules["pandas"] = _PandasAtImport("pandas")
    try:
        from ortools.sat.python import cp_model as module
    finally:
        if isinstance(sys.modules.get("pandas"), _PandasAtImport):
            del sys.modules["pandas"]
    if isinstance(getattr(module, "pd", None), _PandasAtImport):
        module.pd = _PandasOnFirstUse("pandas")
    return module


if TYPE_CHECKING:
    from ortools.sat.python import cp_model as cp_model
else:
    cp_model = _import_cp_model()
