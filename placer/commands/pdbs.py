"""``redis-placer pdbs``: one PodDisruptionBudget per Redis shard, ready for ``kubectl apply``."""

import json
from collections.abc import Mapping
from typing import Any

import click
import yaml

from placer.commands.options import (
    DUMP_EPILOG,
    exit_code,
    finish,
    input_issues,
    load_inputs,
    namespace_option,
    with_source,
)
from placer.kube.pdb import shard_pdbs
from placer.output.render import input_note, table

OPERATORS = {"In": "in", "NotIn": "notin"}


def selector_text(selector: Mapping[str, Any]) -> str:
    """A label selector as ``kubectl get -l`` takes it: ``k=v,k in (a,b),k,!k``."""
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for r in selector.get("matchExpressions") or []:
        key, operator = r.get("key"), r.get("operator")
        if operator in OPERATORS:
            parts.append(f"{key} {OPERATORS[operator]} ({','.join(r.get('values') or [])})")
        else:
            parts.append(str(key) if operator == "Exists" else f"!{key}")
    return ",".join(parts)


def pdbs_table(pdbs: list[dict[str, Any]]) -> str:
    rows = [
        [
            p["metadata"]["namespace"],
            p["metadata"]["name"],
            str(p["spec"]["minAvailable"]),
            selector_text(p["spec"]["selector"]),
        ]
        for p in pdbs
    ]
    return table(["NAMESPACE", "NAME", "MIN AVAILABLE", "SELECTOR"], rows)


@click.command("pdbs", short_help="Print one PodDisruptionBudget per shard.", epilog=DUMP_EPILOG)
@with_source
@namespace_option
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml", "json", "table"]),
    default="yaml",
    show_default=True,
    help="yaml: a stream of documents; json: a v1 List (both for kubectl apply -f -); "
    "table: one line per budget.",
)
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    namespace: str | None,
    output: str,
) -> None:
    """Print one PodDisruptionBudget per shard, for `kubectl apply -f -`.

    Each has minAvailable one less than the shard's members and selects its shard's pods by the
    policy's selector, cluster and shard labels (or by their pod names).

    A single budget over all masters lets a drain take a master and its own replica together;
    one per shard lets it take one member of each shard at a time.
    """
    policy, snapshot = load_inputs(
        file, policy_path, context, kubeconfig, allow_empty, namespace=namespace
    )
    pdbs = shard_pdbs(snapshot, policy)
    skipped = input_issues(snapshot)
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": pdbs}, indent=2))
    elif output == "table":
        click.echo(pdbs_table(pdbs))
        note = input_note(skipped)
        if note:
            click.echo(note)
    else:
        click.echo(yaml.safe_dump_all(pdbs, sort_keys=False, explicit_start=True), nl=False)
        note = input_note(skipped)
        if note:  # a comment, so that the stream stays valid for kubectl apply
            click.echo(f"# {note}")
    finish(skipped, [], exit_code(skipped=skipped, unplaced=False, hard=False))
