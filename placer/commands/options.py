"""What every command shares: the source options, the one error path and the exit codes.

Exit codes, the same for every command (the highest-ranked one that applies wins):

* 2 bad input or usage: a fatal error is one line on stderr and nothing on stdout; an object
  that cannot be trusted (a pod without its shard label, a shard with two masters) is an
  ``error:`` line on stderr, and what could be judged is still printed;
* 3 some pending pods cannot be placed (the reason is printed, per pod);
* 1 hard violations remain (audit: found; plan, rebalance: left after the plan; drill: a drilled
  failure loses a shard or a Redis cluster's master majority);
* 0 otherwise.

Odd but usable input is a ``warning:`` line on stderr and changes no exit code.
"""

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn, TextIO

import click

from models.errors import InputError
from models.plan import Plan, SkippedInput
from models.policy import MAX_TIME_LIMIT_SECONDS, Policy
from models.snapshot import Snapshot
from placer.inputs.content import DUMP_COMMAND
from placer.inputs.files import read_policy, snapshot_from_file
from placer.output import render
from solver.check import master_quorum_warnings, standing_violations
from solver.collector import collector_paused

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
OUTPUTS = click.Choice(["table", "json", "yaml", "html", "map"])


def fail(message: str) -> NoReturn:
    """The one way a command stops on bad input or usage: one line on stderr, exit 2."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def run_main(main: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run click's ``main`` with this error path instead of click's own.

    Every failure a command does not handle itself ends the same way: ``error: ...`` on stderr
    and exit 2 (click usage errors, ``InputError`` from any input, ``click.ClickException``).
    A reader that goes away (``| head``) neither changes the exit code nor prints a traceback.
    """
    if not kwargs.pop("standalone_mode", True):
        return main(*args, standalone_mode=False, **kwargs)
    with _pipe_tolerant() as out:
        try:
            code = _run(main, *args, **kwargs)
        except SystemExit as exc:
            code = exc.code
        out.flush()
        if out.failed is not None:
            # What was printed is not all there: a caller must not take it for the answer.
            fail(f"cannot write the output: {out.failed}")
        sys.exit(EXIT_OK if code is None else code)


def _run(main: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return main(*args, standalone_mode=False, **kwargs)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(EXIT_BAD_INPUT)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        fail(f"{exc.format_message()}{hint}")
    except click.ClickException as exc:
        fail(exc.format_message())
    except InputError as exc:
        fail(str(exc))
    except click.Abort:
        click.echo("error: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


class _PipeTolerant:
    """A text stream that stops writing, silently, once its reader has gone.

    Python raises BrokenPipeError on a write to a closed pipe, and again when it flushes at
    exit; click would turn the first into exit 1, which here means "hard violations". The
    stream's descriptor is pointed at /dev/null instead, so the command runs to its own end and
    exits with its own code. A stream closed before the start (``>&-``) is a reader gone from
    the start. Any other failed write (a full disk) is kept in ``failed``: the output is then
    incomplete, which the caller must say.
    """

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self._gone = stream is None
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        if not self._gone and self._stream is not None:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
            except OSError as exc:
                self._lost(exc)
        return len(text)

    def flush(self) -> None:
        if not self._gone and self._stream is not None:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()
            except OSError as exc:
                self._lost(exc)

    def _lost(self, exc: OSError) -> None:
        self.failed = self.failed or exc
        self._reader_gone()

    def _reader_gone(self) -> None:
        self._gone = True
        try:
            fd = self._stream.fileno()  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            return  # not a real descriptor (a test runner's buffer): nothing left to flush
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def _pipe_tolerant() -> Iterator[_PipeTolerant]:
    saved = sys.stdout, sys.stderr
    out = _PipeTolerant(sys.stdout)
    sys.stdout = out
    sys.stderr = _PipeTolerant(sys.stderr)
    try:
        yield out
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):
        return False


class StderrProgress:
    """Progress on stderr while a solve runs: once it has run a second, a line at most every two
    seconds, naming the phase and, when known, the objective and bound of the plan so far. Only
    on a terminal: a log or a pipe gets the answer, not timing lines that differ run to run."""

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
        if _is_terminal(sys.stderr):
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


def overrun(started: float, read: float, time_limit: float | None, policy: Policy) -> list[str]:
    """A warning when the command has run past its time limit: a limit shorter than starting
    and reading the input cannot be kept, and the answer must not pass for one that kept it."""
    limit = time_limit if time_limit is not None else policy.solver.time_limit_seconds
    took = time.monotonic() - started
    if took <= limit:
        return []
    return [
        f"took {took:.2f} s, beyond its {limit:g} s time limit: starting and reading the "
        f"input took {read - started:.2f} s of it; give it more time (--time-limit)"
    ]


def load_inputs(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool = False,
    *,
    need_pods: bool = True,
    namespace: str | None = None,
) -> tuple[Policy, Snapshot]:
    """The policy and the snapshot, from a dump (``-f``) or the live cluster. Unless
    ``allow_empty``, an input with nothing to judge is an error: no nodes, or (``need_pods``) no
    pod the policy's selector picks (placer.inputs.content). With ``namespace`` (``-n``), the
    Redis pods are that namespace's only."""
    policy = read_policy(policy_path)
    with collector_paused():
        if file is not None:
            return policy, snapshot_from_file(
                file, policy, allow_empty=allow_empty, need_pods=need_pods, namespace=namespace
            )
        from placer.inputs.live import snapshot_from_cluster

        return policy, snapshot_from_cluster(
            policy,
            context=context,
            kubeconfig=kubeconfig,
            allow_empty=allow_empty,
            need_pods=need_pods,
            namespace=namespace,
        )


def load_live_inputs(
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    connect: Callable[[str | None, str | None], Any] | None = None,
    namespace: str | None = None,
) -> tuple[Policy, Snapshot, Any]:
    """The policy, the live snapshot and the adapter it was read through, for a command that
    goes on talking to the cluster (``connect``: how the adapter is made; the default
    connects to the kubeconfig's cluster)."""
    from placer.inputs.live import connect as connect_to_cluster
    from placer.inputs.live import read_cluster

    policy = read_policy(policy_path)
    adapter = (connect or connect_to_cluster)(kubeconfig, context)
    with collector_paused():
        snapshot = read_cluster(adapter, policy, allow_empty=allow_empty, namespace=namespace)
        return policy, snapshot, adapter


def input_issues(snapshot: Snapshot) -> list[SkippedInput]:
    """The snapshot's issues as a plan lists them (``skipped``)."""
    return [
        SkippedInput(object=i.object, message=i.message, severity=i.severity)
        for i in snapshot.issues
    ]


def completed(snapshot: Snapshot, policy: Policy, plan: Plan, judged: bool = False) -> Plan:
    """A solved plan with what the solver does not judge: the hard problems it leaves standing
    (solver.check.standing_violations), the warnings about the input and the survival verdict.

    ``judged``: the plan's violations are the checker's whole verdict on it (a place-mode
    solve's), so a plan without survive violations is not counted again domain by domain
    (seconds on a large cluster, after the solve's deadline)."""
    from solver.survival import survival_verdicts

    return plan.model_copy(
        update={
            "violations": [*plan.violations, *standing_violations(snapshot, plan)],
            "warnings": [*plan.warnings, *master_quorum_warnings(snapshot, policy)],
            "survival": survival_verdicts(snapshot, policy, plan, judged),
        }
    )


def has_errors(skipped: Sequence[SkippedInput]) -> bool:
    """Some object of the input could not be trusted: the report leaves it out (exit 2)."""
    return any(s.severity == "error" for s in skipped)


def exit_code(*, skipped: Sequence[SkippedInput], unplaced: bool, hard: bool) -> int:
    if has_errors(skipped):
        return EXIT_BAD_INPUT
    if unplaced:
        return EXIT_INFEASIBLE
    if hard:
        return EXIT_VIOLATIONS
    return EXIT_OK


def plan_exit_code(plan: Plan) -> int:
    unplaced = bool(plan.unplaced) or plan.status in ("INFEASIBLE", "MODEL_INVALID")
    return exit_code(skipped=plan.skipped, unplaced=unplaced, hard=bool(plan.hard_violations))


def finish(skipped: Sequence[SkippedInput], warnings: Sequence[str], code: int) -> NoReturn:
    """Input issues and warnings on stderr, one line per cause, then the exit code."""
    for line in render.issue_lines(skipped, warnings):
        click.echo(line, err=True)
    sys.exit(code)


def emit(plan: Plan, snapshot: Snapshot, output: str) -> None:
    with collector_paused():  # a plan's document: a dict per pod
        _emit(plan, snapshot, output)


def _emit(plan: Plan, snapshot: Snapshot, output: str) -> None:
    if output == "table":
        click.echo(render.plan_table(plan, snapshot))
    elif output in ("html", "map"):
        from placer.output.pictures import plan_picture

        click.echo(plan_picture(plan, snapshot, output))
    else:
        click.echo(render.as_document(plan, output))


class Seconds(click.FloatRange):
    """A positive, finite number of seconds: ``nan`` and ``inf`` are not a time limit."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


context_option = click.option(
    "--context", default=None, help="kubeconfig context (default: in-cluster or current)."
)
kubeconfig_option = click.option(
    "--kubeconfig",
    default=None,
    type=click.Path(dir_okay=False),
    help="kubeconfig file for the live cluster.",
)
allow_empty_option = click.option(
    "--allow-empty",
    is_flag=True,
    help="Accept an input with nothing to judge: no nodes, or no pod the selector matches (an "
    "error otherwise: an empty input is never reported as healthy).",
)
source_options = [
    click.option(
        "-f",
        "--file",
        "file",
        type=str,
        metavar="FILE",
        default=None,
        help="Snapshot: a dump of the cluster (the command is below), or - for stdin. Without it, the live cluster is read.",
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
    allow_empty_option,
]


DUMP_EPILOG = f"A dump holds everything the tool reads: {DUMP_COMMAND} > dump.yaml (or -o json)."
"""The commands that read a snapshot end their help with the one dump command."""

output_option = click.option(
    "-o",
    "--output",
    type=OUTPUTS,
    default="table",
    show_default=True,
    help="table: for a terminal; json or yaml: the whole report as a document; html: a page "
    "with the topology drawn; map: the topology as text.",
)
namespace_option = click.option(
    "-n",
    "--namespace",
    default=None,
    help="The Redis pods of this namespace only (default: every namespace). Pods of other "
    "namespaces, Redis or not, count only as load on their nodes.",
)


def time_limit_option(default: float | None = None, minimum: float = 0.01, help: str = "") -> Any:
    return click.option(
        "--time-limit",
        type=Seconds(min=minimum, max=MAX_TIME_LIMIT_SECONDS),
        default=default,
        show_default=default is not None,
        help=help
        or "Seconds for the whole command, reading the input included (policy solver.timeLimitSeconds by default).",
    )


def with_source(fn: Any) -> Any:
    for option in reversed(source_options):
        fn = option(fn)
    return fn
