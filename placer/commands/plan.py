"""``redis-placer plan``: solve the placement of the pending pods and print the plan."""

import sys
from typing import cast

import click

from models.plan import Mode
from placer.commands.options import (
    StderrProgress,
    emit,
    exit_code,
    load_inputs,
    output_option,
    time_limit_option,
    with_source,
)
from solver.solve import SolveOptions, solve


@click.command("plan")
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
def command(
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
        SolveOptions(time_limit=time_limit, workers=workers, progress=StderrProgress()),
    )
    emit(result, snapshot, output)
    sys.exit(exit_code(result))
