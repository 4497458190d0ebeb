"""``redis-placer audit``: judge the placement as it runs, without solving anything."""

import click

from placer.commands.options import (
    DUMP_EPILOG,
    exit_code,
    finish,
    input_issues,
    load_inputs,
    namespace_option,
    output_option,
    with_source,
)
from placer.inputs.content import require_running
from placer.output import render
from solver.check import audit as audit_violations
from solver.check import evaluate_objective, keep_plan, master_quorum_warnings, worst_domain_loss
from solver.collector import collector_paused
from solver.survival import survival_verdicts


@click.command(
    "audit",
    short_help="Judge the running placement: survival first, then every rule.",
    epilog=DUMP_EPILOG,
)
@with_source
@namespace_option
@output_option
@collector_paused()  # one run, then exit: no cycles worth a walk of every pod
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    namespace: str | None,
    output: str,
) -> None:
    """Judge the running placement: survival of one host, rack or zone lost, then every violation.

    Nothing is solved. A level where one domain's loss takes a master majority or a whole shard
    is a soft finding (hard at the level rules.survive names). Exit 1 when hard violations exist.
    """
    policy, snapshot = load_inputs(
        file, policy_path, context, kubeconfig, allow_empty, namespace=namespace
    )
    if not allow_empty:
        require_running(snapshot, file or "cluster")
    current = keep_plan(snapshot)
    violations = audit_violations(snapshot, policy)
    report = current.model_copy(
        update={
            "status": "FEASIBLE",
            "violations": violations,
            "worst_domain_loss": worst_domain_loss(snapshot, policy, current),
            "objective": evaluate_objective(snapshot, policy, current).get("total", 0.0),
            "unplaced": [],
            "skipped": input_issues(snapshot),
            "warnings": master_quorum_warnings(snapshot, policy),
            "survival": survival_verdicts(snapshot, policy, current),
        }
    )
    if output == "table":
        verdict = render.survival_lines(report.survival)
        if verdict:
            click.echo("\n".join(verdict))
            click.echo()
        click.echo(
            render.violations_table(violations)
            if violations
            else render.no_violations(report.survival)
        )
        click.echo()
        click.echo(render.audit_summary(report))
    elif output in ("html", "map"):
        from placer.output.pictures import audit_picture

        click.echo(audit_picture(report, snapshot, output))
    else:
        click.echo(render.audit_document(report, output))
    code = exit_code(skipped=report.skipped, unplaced=False, hard=bool(report.hard_violations))
    finish(report.skipped, report.warnings, code)
