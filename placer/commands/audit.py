"""``redis-placer audit``: judge the placement as it runs, without solving anything."""

import click

from placer.commands.options import (
    exit_code,
    finish,
    input_issues,
    load_inputs,
    output_option,
    with_source,
)
from placer.output import render
from solver.check import audit as audit_violations
from solver.check import evaluate_objective, keep_plan, master_quorum_warnings, worst_domain_loss


@click.command("audit")
@with_source
@output_option
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    output: str,
) -> None:
    """Report the violations of the current placement; exit 1 when hard ones exist."""
    policy, snapshot = load_inputs(file, policy_path, context, kubeconfig, allow_empty)
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
        }
    )
    if output == "table":
        click.echo(render.violations_table(violations) if violations else "no violations")
        click.echo()
        click.echo(render.audit_summary(report))
    elif output in ("html", "map"):
        from placer.output.pictures import audit_picture

        click.echo(audit_picture(report, snapshot, output))
    else:
        click.echo(render.as_document(report, output))
    code = exit_code(skipped=report.skipped, unplaced=False, hard=bool(report.hard_violations))
    finish(report.skipped, report.warnings, code)
