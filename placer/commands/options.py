"""What every command shares: the source options, the one error path and the exit codes.

Errors are one line on stderr and exit 2; exit codes follow the plan contract:
0 every pending pod placed and no hard violation, 1 audit found hard violations,
2 bad input or usage, 3 infeasible (the explanation is printed).
"""

import sys
import threading
import time
from typing import NoReturn

import click

from models.errors import InputError
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.inputs.files import read_policy, snapshot_from_file
from placer.output import render

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3
OUTPUTS = click.Choice(["table", "json", "yaml"])


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


class StderrProgress:
    """Progress on stderr while a solve runs: once it has run a second, a line at most every two
    seconds, naming the phase and, when known, the objective and bound of the plan so far."""

    FIRST, EVERY = 1.0, 2.0

    def __init__(self, started: float | None = None) -> None:
        self.started = started if started is not None else time.monotonic()
        self.phase = "reading"
        self.objective: float | None = None
        self.bound: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, phase: str, objective: float | None, bound: float | None) -> None:
        self.phase = phase
        if objective is not None:
            self.objective, self.bound = objective, bound

    def __enter__(self) -> "StderrProgress":
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        figures = ""
        if self.objective is not None:
            bound = self.bound if self.bound is not None else 0.0
            gap = (self.objective - bound) / self.objective if self.objective else 0.0
            figures = f"  objective {self.objective:g}  bound {bound:g}  gap {gap:.2%}"
        return f"  {self.phase}:{figures}  {elapsed:.1f}s"

    def _run(self) -> None:
        wait = self.FIRST
        while not self._stop.wait(wait):
            click.echo(self.line(), err=True)
            wait = self.EVERY


def deadline_of(
    started: float, time_limit: float | None, policy: Policy, snapshot: Snapshot
) -> float:
    """When the solver must be done so that the whole command ends within its time limit:
    the limit counts from the command's start (reading the input is inside it), less what
    printing the plan takes (about 20 microseconds per pod, measured)."""
    limit = time_limit if time_limit is not None else policy.solver.time_limit_seconds
    printing = 0.05 + 20e-6 * (len(snapshot.members) + len(snapshot.nodes))
    return started + limit - printing


def load_inputs(
    file: str | None, policy_path: str | None, context: str | None, kubeconfig: str | None
) -> tuple[Policy, Snapshot]:
    try:
        policy = read_policy(policy_path)
        if file is not None:
            return policy, snapshot_from_file(file, policy)
        from placer.inputs.live import snapshot_from_cluster

        return policy, snapshot_from_cluster(policy, context=context, kubeconfig=kubeconfig)
    except InputError as exc:
        fail(str(exc))


def exit_code(plan: Plan) -> int:
    if any(s.severity == "error" for s in plan.skipped):
        return EXIT_BAD_INPUT
    if plan.unplaced or plan.status in ("INFEASIBLE", "MODEL_INVALID"):
        return EXIT_INFEASIBLE
    if plan.hard_violations:
        return EXIT_VIOLATIONS
    return EXIT_OK


def emit(plan: Plan, snapshot: Snapshot, output: str) -> None:
    if output == "table":
        click.echo(render.plan_table(plan, snapshot))
    else:
        click.echo(render.as_document(plan, output))


context_option = click.option(
    "--context", default=None, help="kubeconfig context (default: in-cluster or current)."
)
kubeconfig_option = click.option(
    "--kubeconfig",
    default=None,
    type=click.Path(dir_okay=False),
    help="kubeconfig file for the live cluster.",
)
source_options = [
    click.option(
        "-f",
        "--file",
        "file",
        type=str,
        default=None,
        help="Snapshot: `kubectl get nodes,pods -A -o yaml|json` output, or - for stdin. Without it, the live cluster is read.",
    ),
    click.option(
        "-p",
        "--policy",
        "policy_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="Policy YAML (defaults serve without one).",
    ),
    context_option,
    kubeconfig_option,
]


output_option = click.option("-o", "--output", type=OUTPUTS, default="table", show_default=True)
time_limit_option = click.option(
    "--time-limit",
    type=click.FloatRange(min=0.01, max=86_400),
    default=None,
    help="Seconds for the whole command, reading the input included (policy solver.timeLimitSeconds by default).",
)


def with_source(fn):
    for option in reversed(source_options):
        fn = option(fn)
    return fn
