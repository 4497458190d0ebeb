"""Benchmark: where the ``plan`` command spends its time limit, step by step, in one process.

    python -m benchmarks.plan_phases --write-case huge DUMP    # a benchmarks.run case as a dump
    python -m benchmarks.plan_phases DUMP [--time-limit 20] [--policy FILE]

The command's own steps with their clocks, as ``placer/commands/plan.py`` runs them: imports,
reading the dump (``load_inputs``), the solve (``deadline_of``, ``solve`` with a progress
callback whose phases are timed), what ``completed`` adds, and printing the plan as JSON (to
memory). Printed: seconds per step, when each solver phase began (seconds from the start), and
the plan's status, engine, objective, bound, unplaced pods and hard violations.
"""

import argparse
import contextlib
import io
import json
import time

import placer

STARTED = placer.command_started()

from placer.commands.options import completed, deadline_of, emit, load_inputs  # noqa: E402
from solver.solve import SolveOptions, solve  # noqa: E402


def write_case(name: str, path: str) -> None:
    """The case's generated cluster (seed 7, as benchmarks.run makes it) as a JSON dump."""
    from benchmarks.run import CASES, case_document

    document = case_document(CASES[name])
    with open(path, "w") as f:
        json.dump(document, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dump")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--policy", default=None)
    parser.add_argument("--write-case", default=None, help="write this benchmarks.run case to DUMP")
    args = parser.parse_args()
    if args.write_case:
        write_case(args.write_case, args.dump)
        return
    imported = time.monotonic()
    policy, snapshot = load_inputs(args.dump, args.policy, None, None)
    read = time.monotonic()
    deadline = deadline_of(STARTED, args.time_limit, policy, snapshot)
    marks: list[tuple[float, str]] = []

    def progress(phase: str, _objective: float | None, _bound: float | None) -> None:
        key = phase.split(":")[0].split(" (")[0]
        if not marks or marks[-1][1] != key:
            marks.append((time.monotonic() - STARTED, key))

    plan = solve(snapshot, policy, "place", SolveOptions(deadline=deadline, progress=progress))
    solved = time.monotonic()
    plan = completed(snapshot, policy, plan, judged=True)
    finished = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        emit(plan, snapshot, "json")
    printed = time.monotonic()
    print(
        f"imports {imported - STARTED:.2f} s, reading {read - imported:.2f} s, solve "
        f"{solved - read:.2f} s (deadline at {deadline - STARTED:.2f} s), completing "
        f"{finished - solved:.2f} s, printing {printed - finished:.2f} s, whole "
        f"{printed - STARTED:.2f} s"
    )
    print("phases from the start: " + ", ".join(f"{t:.1f} s {k}" for t, k in marks))
    hard = sum(1 for v in plan.violations if v.severity == "hard")
    print(
        f"{plan.status} {plan.engine} objective {plan.objective:g} bound {plan.bound:g} "
        f"unplaced {len(plan.unplaced)} hard {hard}"
    )


if __name__ == "__main__":
    main()
