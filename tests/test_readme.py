"""Every `redis-placer` command and option in the README's code blocks exists in the CLI.

The CLI is asked through click's own introspection (the group's commands, each command's
params), so a renamed option or command fails here before a reader types it.
"""

import re
from dataclasses import dataclass
from pathlib import Path

import click

from placer.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INVOCATION = re.compile(r"(?:^|(?<=[\s(]))redis-placer(?=\s|$)")
STOPS = {"|", "&&", "||", ";", "#"}


@dataclass(frozen=True)
class Problem:
    line: str
    message: str


def code_lines(markdown: str) -> list[str]:
    return [line for block in FENCE.findall(markdown) for line in block.splitlines()]


def invocations(line: str) -> list[list[str]]:
    """The words after each `redis-placer` of a shell line, up to the end of its command."""
    found = []
    for match in INVOCATION.finditer(line):
        words: list[str] = []
        for word in line[match.end() :].split():
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
    if command is main and not any(w.startswith("-") for w in words):
        return [Problem(line, "redis-placer without a command")]
    known = _options(command, ctx)
    problems = []
    for word in rest:
        if not word.startswith("-") or word == "-" or word.startswith("-]"):
            continue
        option = word.split("=", 1)[0]
        if option not in known:
            problems.append(Problem(line, f"{ctx.command_path}: no option {option}"))
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


def test_the_check_finds_an_unknown_option_and_command() -> None:
    text = (
        "```bash\n"
        "redis-placer plan -f dump.yaml [--mode place|rebalance] [--no-such-flag N]\n"
        "kubectl get pods -o yaml | redis-placer frobnicate -f -\n"
        "redis-placer policy validate --fil x.yaml\n"
        "```\n"
    )
    count, problems = problems_in(text)
    assert count == 3
    assert [p.message for p in problems] == [
        "redis-placer plan: no option --no-such-flag",
        "no command 'frobnicate'",
        "redis-placer policy validate: no option --fil",
    ]


def test_options_of_other_tools_and_text_after_a_pipe_are_not_ours() -> None:
    text = (
        "```\n"
        "$ kubectl get nodes,pods -A -o yaml | redis-placer audit -f - 2>/dev/null | head -n 3\n"
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
