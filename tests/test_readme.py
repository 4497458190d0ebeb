"""Every `redis-placer` command and option in the README's code blocks (and the guides') exists.

The CLI is asked through click's own introspection (the group's commands, each command's
params), so a renamed option or command fails here before a reader types it.
"""

import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from placer.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# The pages that show commands: the guides, each operator's profile, and the references with examples.
GUIDES = sorted(
    [
        *(DOCS / "guides").glob("*.md"),
        *(p for p in (DOCS / "profiles").glob("*.md") if p.name != "index.md"),
        *(DOCS / "reference" / name for name in ("cli.md", "exit-codes.md", "policy.md")),
    ]
)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
# redis-placer where a shell starts a command: a line's start (after a `$ ` prompt and any
# VAR=value), after a pipe, `&&`, `;` or `$(`, or as a kubectl plugin.
INVOCATION = re.compile(
    r"(?:^(?:\$\s+)?(?:[A-Z_]+=\S*\s+)*|[|;&(]\s*|\bkubectl\s+)redis-placer(?=\s|$)"
)
STOPS = {"|", "&&", "||", ";", "#"}


@dataclass(frozen=True)
class Problem:
    line: str
    message: str


def code_lines(markdown: str) -> list[str]:
    return [line for block in FENCE.findall(markdown) for line in block.splitlines()]


def invocations(line: str) -> list[list[str]]:
    """The words after each `redis-placer` of a shell line, up to the end of its command."""
    found: list[list[str]] = []
    if line.lstrip().startswith("Usage:"):
        return found  # click's own usage line, printed by --help
    for match in INVOCATION.finditer(line.strip()):
        words: list[str] = []
        for word in line.strip()[match.end() :].split():
            if word in STOPS or word.startswith((">", "2>", "1>", "<")) or word.startswith("#"):
                break
            words.append(word)
        found.append(words)
    return found


def _options(command: click.Command, ctx: click.Context) -> set[str]:
    names: set[str] = set()
    for param in command.get_params(ctx):
        names.update(param.opts)
        names.update(param.secondary_opts)
    return names


def check(words: list[str], line: str) -> list[Problem]:
    """Walk the words down the command group, then look up every option of the command reached."""
    command: click.Command = main
    ctx = click.Context(main, info_name="redis-placer")
    words = [w.strip("[]") for w in words]
    rest = list(words)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            if command is main:
                return [Problem(line, f"no command {rest[0]!r}")]
            break
        command = sub
        ctx = click.Context(sub, info_name=rest.pop(0), parent=ctx)
    params = {
        opt: param
        for param in command.get_params(ctx)
        for opt in (*param.opts, *param.secondary_opts)
    }
    problems = []
    for i, word in enumerate(rest):
        if not word.startswith("-") or word == "-":
            continue
        option = word.split("=", 1)[0]
        if option not in params:
            problems.append(Problem(line, f"{ctx.command_path}: no option {option}"))
            continue
        # `[-o table|json]`: the alternatives shown are the option's choices.
        choices = getattr(params[option].type, "choices", None)
        shown = rest[i + 1] if i + 1 < len(rest) else ""
        if choices is not None and "|" in shown:
            for value in shown.split("|"):
                if value not in choices:
                    problems.append(Problem(line, f"{ctx.command_path} {option}: no {value!r}"))
    return problems


def problems_in(markdown: str) -> tuple[int, list[Problem]]:
    count = 0
    problems: list[Problem] = []
    for line in code_lines(markdown):
        for words in invocations(line):
            count += 1
            problems.extend(check(words, line))
    return count, problems


def test_every_readme_command_and_option_exists() -> None:
    count, problems = problems_in(README.read_text(encoding="utf-8"))
    assert count >= 5, f"only {count} redis-placer commands found in the README's code blocks"
    assert problems == []


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: p.name)
def test_every_command_and_option_of_a_guide_exists(page: Path) -> None:
    count, problems = problems_in(page.read_text(encoding="utf-8"))
    assert count >= 1, f"no redis-placer command in the code blocks of {page}"
    assert problems == []


def test_the_check_finds_an_unknown_option_and_command() -> None:
    text = (
        "```bash\n"
        "redis-placer plan -f dump.yaml [--mode place|rebalance] [--no-such-flag N]\n"
        "redis-placer pdbs [-o yaml|json|html]\n"
        "kubectl get pods -o yaml | redis-placer frobnicate -f -\n"
        "redis-placer policy validate --fil x.yaml\n"
        "```\n"
    )
    count, problems = problems_in(text)
    assert count == 4
    assert [p.message for p in problems] == [
        "redis-placer plan: no option --no-such-flag",
        "redis-placer pdbs -o: no 'html'",
        "no command 'frobnicate'",
        "redis-placer policy validate: no option --fil",
    ]


def test_options_of_other_tools_and_text_after_a_pipe_are_not_ours() -> None:
    text = (
        "```\n"
        "$ kubectl get nodes,pods,statefulsets,pv,pvc,storageclasses -A -o yaml | redis-placer audit -f - 2>/dev/null | head -n 3\n"
        "$ pip install -c constraints.txt -e . && redis-placer demo --time-limit 2\n"
        "    annotations: {redis-placer.io/shard-size: '2'}\n"
        "```\n"
    )
    count, problems = problems_in(text)
    assert count == 2
    assert problems == []


INLINE_OPTION = re.compile(r"`(--?[a-z][a-z-]*)[ =`]")


def all_options() -> set[str]:
    """Every option of every command, nested groups included."""
    found: set[str] = set()

    def walk(command: click.Command, ctx: click.Context) -> None:
        found.update(_options(command, ctx))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(main, click.Context(main, info_name="redis-placer"))
    return found


def test_every_option_named_in_the_readme_prose_exists() -> None:
    """An option in running text (`--apply`, `--fail zone=zone-a`) is an option of some command."""
    prose = FENCE.sub("", README.read_text(encoding="utf-8"))
    named = set(INLINE_OPTION.findall(prose))
    assert len(named) >= 3, f"only {sorted(named)} named in the README's prose"
    assert sorted(named - all_options()) == []


def test_the_readme_is_a_landing_page_of_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_quick_start_names_the_zone_whose_loss_it_describes() -> None:
    """The demo's table says which zone greedy and the stock rules lose; the words above it
    name that zone."""
    text = README.read_text(encoding="utf-8")
    quick = text[text.index("## Quick start") : text.index("$ redis-placer demo")]
    (row,) = [line for line in text.splitlines() if line.startswith("survives losing a zone")]
    lost = set(re.findall(r"NO: (\S+)", row))
    assert lost, row
    for zone in lost:
        assert f"losing {zone} " in " ".join(quick.split()), zone
    assert "that zone" not in quick


def _paragraph(text: str, start: str) -> str:
    i = text.index(start)
    return " ".join(text[i : text.index("\n\n", i)].split())


def test_the_exit_codes_said_are_what_rebalance_and_drill_do() -> None:
    """`1` is hard violations, but for rebalance those its changes leave (its audit may show
    hard ones it removes: exit 0) and for drill a lost shard or majority (with no hard
    violation: exit 1). The README and the reference say so."""
    from click.testing import CliRunner

    REBALANCE_EXAMPLE = str(ROOT / "placer" / "examples" / "rebalance.yaml")
    THREE_ZONES = str(ROOT / "placer" / "examples" / "three-zones.yaml")

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, list(args))
        return result.exit_code, result.stdout

    code, out = run("rebalance", "-f", REBALANCE_EXAMPLE)
    assert code == 0 and re.search(r"^hard\s", out, re.M), out
    code, out = run("rebalance", "-f", REBALANCE_EXAMPLE, "--max-moves", "0")
    assert code == 1 and "after these changes: 1 hard violation remains" in out, out
    code, out = run("audit", "-f", THREE_ZONES)
    assert code == 0 and "violations 0 hard, 1 soft" in out, out
    code, out = run("drill", "-f", THREE_ZONES, "--fail", "zone=zone-a")
    assert code == 1 and "verdict: 1 of 1 failures drilled lose" in out, out

    said = _paragraph(README.read_text(encoding="utf-8"), "Exit codes:")
    assert "for every command" not in said
    assert "`rebalance`'s changes" in said and "for `drill`, a failure that loses" in said, said
    reference = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    (one,) = [line for line in reference.splitlines() if line.startswith("| `1` |")]
    assert "`rebalance`" in one and "for `drill`, a drilled failure that loses" in one, one
