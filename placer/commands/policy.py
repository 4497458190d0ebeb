"""``redis-placer policy``: the default policy as a file to start from, and a check of a file."""

import json

import click
import yaml

from models.identity.profiles import PROFILES
from models.policy import Policy
from placer.inputs.files import read_policy


def defaults_yaml(profile: str = "labels") -> str:
    """Every policy key at its default for a profile, in the file's own spelling (camelCase):
    valid for ``-p`` as it is."""
    policy = Policy.model_validate({"identity": {"profile": profile}})
    data = policy.model_dump(mode="json", by_alias=True)
    return f"# redis-placer policy: every key at its default, profile {profile}\n" + yaml.safe_dump(
        data, sort_keys=False
    )


@click.group(
    "policy",
    short_help="Print the default policy, or validate a policy file.",
    invoke_without_command=True,
)
@click.option(
    "--print-defaults",
    is_flag=True,
    help="Print the full default policy as YAML (a file to edit and pass with -p).",
)
@click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    default="labels",
    show_default=True,
    help="With --print-defaults: the defaults for pods as this deployment makes them "
    "(ot-operator, bitnami, valkey-io, hyperspike; labels: redis-placer's own labels).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="With --print-defaults: yaml, with a comment naming the profile, or json (both valid "
    "for -p).",
)
@click.pass_context
def command(ctx: click.Context, print_defaults: bool, profile: str, output: str) -> None:
    """Print the default policy, or validate a policy file."""
    if ctx.invoked_subcommand is not None:
        if print_defaults:
            raise click.UsageError("--print-defaults takes no subcommand", ctx)
        if ctx.get_parameter_source("output") is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("-o goes with --print-defaults, not a subcommand", ctx)
        return
    if not print_defaults:
        raise click.UsageError("give --print-defaults or a subcommand (validate)", ctx)
    if output == "json":
        policy = Policy.model_validate({"identity": {"profile": profile}})
        click.echo(json.dumps(policy.model_dump(mode="json", by_alias=True), indent=2))
    else:
        click.echo(defaults_yaml(profile), nl=False)


@command.command("validate")
@click.option(
    "-p",
    "--policy",
    "path",
    metavar="FILE",
    default=None,
    help="The policy YAML to check (- for stdin).",
)
@click.option(
    "-f",
    "--file",
    "old_path",
    metavar="FILE",
    default=None,
    hidden=True,
    help="Deprecated: the policy YAML; give it with -p, as every other command takes it.",
)
def validate(path: str | None, old_path: str | None) -> None:
    """Check a policy file: exit 0 and "valid", or exit 2 and the first problem in one line."""
    if path is not None and old_path is not None:
        raise click.UsageError("give the policy once, with -p (-f is its deprecated spelling)")
    if old_path is not None:
        click.echo("warning: policy validate -f is deprecated: give the policy with -p", err=True)
        path = old_path
    if path is None:
        raise click.UsageError("give the policy to check with -p FILE (- for stdin)")
    read_policy(path)
    click.echo(f"policy {path}: valid")
