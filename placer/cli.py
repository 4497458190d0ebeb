"""The ``redis-placer`` command line: one group, each command in the module of its use.

``plan``, ``audit``, ``demo``, ``policy``, ``drill``, ``headroom``, ``pdbs`` and ``release-gates``
(on demand) live in
``placer/commands/``, ``binder`` in
``placer/binder/`` and ``rebalance`` in ``placer/rebalance/``. A command's module is imported
only when the command is named (or listed), so ``--help`` of one never loads the others.
"""

import contextlib
import difflib
import logging
import os
import sys
import threading
from importlib import import_module
from typing import Any

import click

COMMANDS = {
    "plan": "placer.commands.plan",
    "policy": "placer.commands.policy",
    "audit": "placer.commands.audit",
    "demo": "placer.commands.demo",
    "drill": "placer.commands.drill",
    "headroom": "placer.commands.headroom",
    "pdbs": "placer.commands.pdbs",
    "release-gates": "placer.commands.release_gates",
    "maintenance": "placer.maintenance.command",
    "binder": "placer.binder.command",
    "rebalance": "placer.rebalance.command",
}


class _Commands(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Through the one error path that every command shares (placer.commands.options)."""
        from placer.commands.options import run_main

        return run_main(super().main, *args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """A name that is no command gets the commands it is close to, as kubectl names them
        ("did you mean"): click finds them only among commands it has loaded, and none is
        loaded before it is named."""
        name = args[0] if args else ""
        if name and name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            close = suggestions(name)
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {close}?")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        command: click.Command = import_module(module).command
        return command


def suggestions(name: str) -> str:
    """The commands ``name`` may have meant, quoted ("" when none): those a typo or two away,
    and those it begins."""
    typed = name.lower()
    close = difflib.get_close_matches(typed, list(COMMANDS), n=3, cutoff=0.6)
    close += [c for c in sorted(COMMANDS) if c.startswith(typed) and c not in close]
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return quoted[0] if len(quoted) == 1 else f"one of {', '.join(quoted)}"


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="redis-placer")
def main() -> None:
    """Place Redis Cluster shards on Kubernetes with a constraint solver (OR-tools CP-SAT)."""


def kubectl_main() -> None:
    """``kubectl redis-placer ...``: kubectl runs the ``kubectl-redis_placer`` executable on the
    PATH for it (its plugin convention), and help and errors name the command as typed."""
    _leave_fast(
        lambda: main(
            prog_name="kubectl redis-placer", complete_var="_KUBECTL_REDIS_PLACER_COMPLETE"
        )
    )


def console() -> None:
    """The ``redis-placer`` executable: the command, then a fast exit (see ``_leave_fast``)."""
    _leave_fast(main)


def _leave_fast(run: Any) -> None:
    """Run the command, flush its output and end the process without tearing the interpreter
    down: unloading OR-tools and its libraries took 0.3-0.7 s on a loaded machine, after the
    plan is printed, and a time limit counts to the end of the process. Only when no other
    non-daemon thread is left, so nothing that a normal exit would wait for is cut short."""
    try:
        run()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(not t.daemon for t in others):
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # | head, >&-
            stream.flush()
    os._exit(code)


if __name__ == "__main__":  # python -m placer.cli, as the console script does
    console()
