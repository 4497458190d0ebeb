"""``redis-placer pdbs``: one PodDisruptionBudget per Redis shard, ready for ``kubectl apply``."""

import json
import sys

import click
import yaml

from placer.commands.options import EXIT_BAD_INPUT, EXIT_OK, fail, load_inputs, with_source
from placer.kube.pdb import shard_pdbs


@click.command("pdbs")
@with_source
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="yaml: a stream of documents; json: a v1 List.",
)
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    output: str,
) -> None:
    """Print one PodDisruptionBudget per shard (maxUnavailable: 1, selecting the shard's pods by
    the policy's selector, cluster and shard labels), for `kubectl apply -f -`.

    A single budget over all masters lets a drain take a master and its own replica together;
    one per shard lets it take one member of each shard at a time.
    """
    policy, snapshot = load_inputs(file, policy_path, context, kubeconfig)
    pdbs = shard_pdbs(snapshot, policy)
    if not pdbs:
        fail("nothing to cover: the input has no managed Redis shard")
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": pdbs}, indent=2))
    else:
        click.echo(yaml.safe_dump_all(pdbs, sort_keys=False, explicit_start=True), nl=False)
    errors = [i for i in snapshot.issues if i.severity == "error"]
    for issue in errors:
        click.echo(f"input issue: {issue.object}: {issue.message}", err=True)
    sys.exit(EXIT_BAD_INPUT if errors else EXIT_OK)
