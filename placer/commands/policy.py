"""``redis-placer policy``: the default policy as a file to start from, and a check of a file."""

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
@click.pass_context
def command(ctx: click.Context, print_defaults: bool, profile: str) -> None:
    """Print the default policy, or validate a policy file."""
    if ctx.invoked_subcommand is not None:
        if print_defaults:
            raise click.UsageError("--print-defaults takes no subcommand", ctx)
        return
    if not print_defaults:
        raise click.UsageError("give --print-defaults or a subcommand (validate)", ctx)
    click.echo(defaults_yaml(profile), nl=False)


@command.command("validate")
@click.option("-f", "--file", "path", required=True, help="The policy YAML to check (- for stdin).")
def validate(path: str) -> None:
    """Check a policy file: exit 0 and "valid", or exit 2 and the first problem in one line."""
    read_policy(path)
    click.echo(f"policy {path}: valid")
