"""solver.cpsat: cp_model without pandas at import, and its pandas helpers unchanged.

Each case runs in a fresh interpreter: the test process may have imported pandas already.
"""

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_solving_imports_no_pandas() -> None:
    out = _run(
        """
        import sys
        import solver.solve, placer.commands.plan
        print("pandas" in sys.modules)
        """
    )
    assert out == "False"


def test_a_model_still_solves() -> None:
    out = _run(
        """
        from solver.cpsat import cp_model
        model = cp_model.CpModel()
        x = model.new_int_var(0, 5, "x")
        y = model.new_bool_var("y")
        model.add(x + 2 * y <= 4)
        model.maximize(x + 3 * y)
        solver = cp_model.CpSolver()
        status = solver.solve(model)
        print(solver.status_name(status), solver.value(x), solver.value(y))
        """
    )
    assert out == "OPTIMAL 2 1"


def test_pandas_helpers_work_on_real_pandas() -> None:
    """The helpers take the real pandas when first used, so a caller's Index and Series work."""
    out = _run(
        """
        import sys
        from solver.cpsat import cp_model
        assert "pandas" not in sys.modules
        import pandas as pd
        model = cp_model.CpModel()
        index = pd.Index(["a", "b", "c"])
        upper = pd.Series([1, 2, 3], index=index)
        xs = model.new_int_var_series(name="x", index=index, lower_bounds=0, upper_bounds=upper)
        model.maximize(sum(xs))
        solver = cp_model.CpSolver()
        solver.solve(model)
        values = solver.values(xs)
        print(type(xs).__name__, type(values).__name__, list(values))
        """
    )
    assert out == "Series Series [1, 2, 3]"


def test_the_placeholder_gives_the_real_thing_for_any_other_name() -> None:
    """Another OR-tools version may read more of pandas at import: it gets real pandas."""
    out = _run(
        """
        import sys
        from solver.cpsat import _PandasAtImport
        placeholder = _PandasAtImport("pandas")
        sys.modules["pandas"] = placeholder
        frame = placeholder.DataFrame
        import pandas
        real = pandas is not placeholder
        print(frame is pandas.DataFrame, real, placeholder.Index is not pandas.Index)
        """
    )
    assert out == "True True True"


def test_a_process_with_pandas_gets_the_plain_import() -> None:
    out = _run(
        """
        import pandas
        from ortools.sat.python import cp_model as plain
        from solver.cpsat import cp_model
        print(cp_model is plain, cp_model.pd is pandas)
        """
    )
    assert out == "True True"
