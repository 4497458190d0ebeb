"""The ``redis-placer`` command line: one group, each command in the module of its use.

``plan``, ``audit`` and ``demo`` (on demand) live in ``placer/commands/``, ``binder`` in
``placer/binder/`` and ``rebalance`` in ``placer/rebalance/``. A command's module is imported
only when the command is named (or listed), so ``--help`` of one never loads the others.
"""

from importlib import import_module

import click

COMMANDS = {
    "plan": "placer.commands.plan",
    "audit": "placer.commands.audit",
    "demo": "placer.commands.demo",
    "binder": "placer.binder.command",
    "rebalance": "placer.rebalance.command",
}


class _Commands(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        command: click.Command = import_module(module).command
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="redis-placer")
def main() -> None:
    """Place Redis Cluster shards on Kubernetes with a constraint solver (OR-tools CP-SAT)."""


if __name__ == "__main__":  # python -m placer.cli, as the console script does
    main()
