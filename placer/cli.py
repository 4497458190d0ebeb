"""The ``redis-placer`` command line: plan, audit, demo, binder, rebalance.

Errors are one line on stderr and exit 2; exit codes follow the plan contract:
0 every pending pod placed and no hard violation, 1 audit found hard violations,
2 bad input or usage, 3 infeasible (the explanation is printed).
"""

import sys
import time
from importlib import import_module, resources
from typing import NoReturn, cast

import click

from models.errors import InputError
from models.plan import Mode, Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer import render
from placer.source import read_policy, snapshot_from_file
from solver.check import audit as audit_violations
from solver.check import check_plan, evaluate_objective, keep_plan, worst_domain_loss
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3
OUTPUTS = click.Choice(["table", "json", "yaml"])


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


class _StderrProgress:
    """Progress lines on stderr once a solve has run for more than a second."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self, objective: float, bound: float, elapsed: float) -> None:
        if elapsed < 1.0 or elapsed - self.last < 0.5:
            return
        self.last = elapsed
        gap = (objective - bound) / objective if objective else 0.0
        click.echo(
            f"  solving: objective {objective:g}  bound {bound:g}  gap {gap:.2%}  {elapsed:.1f}s",
            err=True,
        )


def load_inputs(
    file: str | None, policy_path: str | None, context: str | None, kubeconfig: str | None
) -> tuple[Policy, Snapshot]:
    try:
        policy = read_policy(policy_path)
        if file is not None:
            return policy, snapshot_from_file(file, policy)
        from placer.live import snapshot_from_cluster

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
    type=click.FloatRange(min=0.01),
    default=None,
    help="Seconds for the solver (policy solver.timeLimitSeconds by default).",
)


def with_source(fn):
    for option in reversed(source_options):
        fn = option(fn)
    return fn


class _Commands(click.Group):
    """The binder and rebalance commands live in their own modules, which import this one's
    options: they are loaded when named (or listed), so either module may be imported first."""

    LAZY = {"binder": "placer.binder_cli", "rebalance": "placer.rebalance_cli"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY:
            command: click.Command = import_module(self.LAZY[cmd_name]).command
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="redis-placer")
def main() -> None:
    """Place Redis Cluster shards on Kubernetes with a constraint solver (OR-tools CP-SAT)."""


@main.command()
@with_source
@click.option(
    "--mode",
    type=click.Choice(["place", "rebalance"]),
    default="place",
    show_default=True,
    help="place: running pods stay, pending pods are placed. rebalance: running pods may move and masters may fail over.",
)
@output_option
@time_limit_option
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="CP-SAT search workers (0 = one per core, at least 4).",
)
def plan(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    mode: str,
    output: str,
    time_limit: float | None,
    workers: int | None,
) -> None:
    """Solve the placement and print the plan."""
    policy, snapshot = load_inputs(file, policy_path, context, kubeconfig)
    result = solve(
        snapshot,
        policy,
        cast(Mode, mode),
        SolveOptions(time_limit=time_limit, workers=workers, progress=_StderrProgress()),
    )
    emit(result, snapshot, output)
    sys.exit(exit_code(result))


@main.command()
@with_source
@output_option
def audit(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    output: str,
) -> None:
    """Report the violations of the current placement; exit 1 when hard ones exist."""
    policy, snapshot = load_inputs(file, policy_path, context, kubeconfig)
    current = keep_plan(snapshot)
    violations = audit_violations(snapshot, policy)
    report = current.model_copy(
        update={
            "status": "FEASIBLE",
            "violations": violations,
            "worst_domain_loss": worst_domain_loss(snapshot, policy, current),
            "objective": evaluate_objective(snapshot, policy, current).get("total", 0.0),
            "unplaced": [],
        }
    )
    if output == "table":
        click.echo(render.violations_table(violations) if violations else "no violations")
        click.echo()
        click.echo(render.summary(report))
        if report.skipped:
            click.echo(
                "\ninput issues:\n"
                + "\n".join(f"  [{s.severity}] {s.object}: {s.message}" for s in report.skipped)
            )
    else:
        click.echo(render.as_document(report, output))
    if any(s.severity == "error" for s in report.skipped):
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(EXIT_VIOLATIONS if report.hard_violations else EXIT_OK)


def example_path() -> str:
    return str(resources.files("placer") / "examples" / "cluster.yaml")


@main.command()
@click.option(
    "-f",
    "--file",
    "file",
    type=str,
    default=None,
    help="Another snapshot to demo on (default: the bundled example).",
)
@click.option("--time-limit", type=click.FloatRange(min=0.01), default=10.0, show_default=True)
def demo(file: str | None, time_limit: float) -> None:
    """Plan a bundled example cluster: the plan, the greedy baseline beside it, and a topology map."""
    path = file or example_path()
    policy, snapshot = load_inputs(path, None, None, None)
    click.echo(
        f"cluster: {path}\n  {len(snapshot.nodes)} nodes, {len(snapshot.running)} running and {len(snapshot.pending)} pending Redis pods\n"
    )
    started = time.monotonic()
    result = solve(
        snapshot, policy, "place", SolveOptions(time_limit=time_limit, progress=_StderrProgress())
    )
    solver_seconds = time.monotonic() - started
    started = time.monotonic()
    baseline = greedy_plan(snapshot, policy)
    greedy_seconds = time.monotonic() - started
    baseline_violations = check_plan(snapshot, policy, baseline)
    baseline_objective = evaluate_objective(snapshot, policy, baseline)
    click.echo("== CP-SAT plan ==")
    click.echo(render.plan_table(result, snapshot))
    click.echo("\n== CP-SAT vs greedy (one pod at a time, like kube-scheduler) ==")
    rows = [
        ["", "CP-SAT", "greedy"],
        [
            "objective (lower is better)",
            f"{result.objective:g}",
            f"{baseline_objective.get('total', 0):g}",
        ],
        [
            "hard violations",
            str(len(result.hard_violations)),
            str(sum(1 for v in baseline_violations if v.severity == "hard")),
        ],
        [
            "soft violations",
            str(len(result.violations) - len(result.hard_violations)),
            str(sum(1 for v in baseline_violations if v.severity == "soft")),
        ],
        ["unplaced pods", str(len(result.unplaced)), str(len(baseline.unplaced))],
        ["seconds", f"{solver_seconds:.2f}", f"{greedy_seconds:.3f}"],
    ]
    for term in ("rack", "zone", "masterBalance", "loadBalance"):
        rows.append(
            [
                f"  cost {term}",
                f"{result.objective_terms.get(term, 0):g}",
                f"{baseline_objective.get(term, 0):g}",
            ]
        )
    width = max(len(r[0]) for r in rows)
    for r in rows:
        click.echo(f"{r[0]:<{width}}  {r[1]:>10}  {r[2]:>10}")
    click.echo("\n== topology after the CP-SAT plan (M master, r replica) ==")
    click.echo(render.topology_map(result, snapshot))
