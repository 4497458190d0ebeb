"""Each command's one-line summary is a whole sentence: `redis-placer --help` lists it and the
CLI reference's list of commands (mkdocs-click) shows it, and neither may cut it short."""

import click
import pytest
from click.testing import CliRunner

from placer.cli import COMMANDS, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_summary_is_one_whole_sentence(name: str) -> None:
    ctx = click.Context(main, info_name="redis-placer")
    command = main.get_command(ctx, name)
    assert command is not None
    summary = command.short_help
    assert summary, f"{name} has no short_help"
    assert summary.endswith(".") and "\n" not in summary, summary
    assert len(summary) <= 66, f"{name}: {len(summary)} characters do not fit one listing line"
    first = (command.help or "").strip().splitlines()[0]
    assert first.endswith("."), f"{name}: the help's first line is cut mid-sentence: {first!r}"


def test_the_listing_of_commands_cuts_no_summary() -> None:
    result = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    listing = result.output.split("Commands:", 1)[1]
    assert "..." not in listing
    for name in COMMANDS:
        assert f"  {name} " in listing
