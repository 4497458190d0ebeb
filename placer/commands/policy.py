"""``redis-placer policy``: the default policy as a file to start from, and a check of a file."""

import click
import yaml

from models.policy import Policy
from placer.inputs.files import read_policy


def defaults_yaml() -> str:
    """Every policy key at its default, in the file's own spelling (camelCase): valid for ``-p``."""
    data = Policy().model_dump(mode="json", by_alias=True)
    return "# redis-placer policy: every key at its default\n" + yaml.safe_dump(
        data, sort_keys=False
    )


@click.group("policy", invoke_without_command=True)
@click.option(
    "--print-defaults",
    is_flag=True,
    help="Print the full default policy as YAML (a file to edit and pass with -p).",
)
@click.pass_context
def command(ctx: click.Context, print_defaults: bool) -> None:
    """Print the default policy, or validate a policy file."""
    if ctx.invoked_subcommand is not None:
        if print_defaults:
            raise click.UsageError("--print-defaults takes no subcommand", ctx)
        return
    if not print_defaults:
        raise click.UsageError("give --print-defaults or a subcommand (validate)", ctx)
    click.echo(defaults_yaml(), nl=False)


@command.command("validate")
@click.option("-f", "--file", "path", required=True, help="The policy YAML to check (- for stdin).")
def validate(path: str) -> None:
    """Check a policy file: exit 0 and "valid", or exit 2 and the first problem in one line."""
    read_policy(path)
    click.echo(f"policy {path}: valid")
