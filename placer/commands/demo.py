"""``redis-placer demo``: the plan of a bundled example beside the greedy baseline, and a map."""

import time
from importlib import resources

import click

from placer.commands.options import (
    StderrProgress,
    allow_empty_option,
    completed,
    finish,
    load_inputs,
    plan_exit_code,
    time_limit_option,
)
from placer.output import render
from placer.output.topology import topology_map
from solver.check import check_plan, evaluate_objective
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve


def example_path() -> str:
    return str(resources.files("placer") / "examples" / "cluster.yaml")


@click.command("demo")
@click.option(
    "-f",
    "--file",
    "file",
    type=str,
    default=None,
    help="Another snapshot to demo on (default: the bundled example).",
)
@allow_empty_option
@time_limit_option(default=10.0, help="Seconds for the solver.")
def command(file: str | None, allow_empty: bool, time_limit: float) -> None:
    """Plan a bundled example cluster: the plan, the greedy baseline beside it, and a topology map."""
    path = file or example_path()
    policy, snapshot = load_inputs(path, None, None, None, allow_empty)
    click.echo(
        f"cluster: {path}\n  {len(snapshot.nodes)} nodes, {len(snapshot.running)} running and {len(snapshot.pending)} pending Redis pods\n"
    )
    started = time.monotonic()
    with StderrProgress(started) as progress:
        result = solve(
            snapshot, policy, "place", SolveOptions(time_limit=time_limit, progress=progress)
        )
    solver_seconds = time.monotonic() - started
    result = completed(snapshot, policy, result)
    started = time.monotonic()
    baseline = greedy_plan(snapshot, policy)
    greedy_seconds = time.monotonic() - started
    baseline_violations = check_plan(snapshot, policy, baseline)
    baseline_objective = evaluate_objective(snapshot, policy, baseline)
    click.echo("== CP-SAT plan ==")
    click.echo(render.plan_table(result, snapshot))
    click.echo("\n== CP-SAT vs greedy (one pod at a time, like kube-scheduler) ==")
    pending = len(snapshot.pending)
    rows = [
        ["", "CP-SAT", "greedy"],
        [
            "pods placed (first: more is better)",
            f"{pending - len(result.unplaced)}/{pending}",
            f"{pending - len(baseline.unplaced)}/{pending}",
        ],
        [
            "hard violations (then: fewer)",
            str(len(result.hard_violations)),
            str(sum(1 for v in baseline_violations if v.severity == "hard")),
        ],
        [
            "objective (then: lower)",
            f"{result.objective:g}",
            f"{baseline_objective.get('total', 0):g}",
        ],
        [
            "soft violations",
            str(len(result.violations) - len(result.hard_violations)),
            str(sum(1 for v in baseline_violations if v.severity == "soft")),
        ],
        ["seconds", f"{solver_seconds:.2f}", f"{greedy_seconds:.3f}"],
    ]
    for term in ("survival", "rackSurvival", "rack", "zone", "masterBalance", "loadBalance"):
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
    click.echo(topology_map(result, snapshot))
    finish(result.skipped, result.warnings, plan_exit_code(result))
