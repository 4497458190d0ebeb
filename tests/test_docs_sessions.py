"""Every `$ command` block of the README and the docs runs here, and prints what the page says.

A block whose first line starts with ``$ `` is a terminal session. The ``$`` lines of every such
block of a page run in one bash, in page order, from a scratch folder that sees the checkout's
``placer/``, ``tests/``, ``deploy/`` and ``docs/``: a page's relative paths work, the files it
writes stay out of the checkout, a file one command writes the next reads, and ``echo $?`` reads
the last status. Each command's stdout and stderr together must be the lines below it, with
durations masked (``0.07s`` and ``0.07 s`` read ``<t>s``) and a line ``...`` standing for any
number of lines.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from models.policy import Policy

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "docs" / "guides").glob("*.md"),
        *(ROOT / "docs" / "profiles").glob("*.md"),
        *(ROOT / "docs" / "reference").glob("*.md"),
    ]
)
SHARED = ("placer", "tests", "deploy", "docs")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?s\b")
ELLIPSIS = "..."


def sessions(markdown: str) -> list[list[tuple[str, list[str]]]]:
    """Each `$` block as (command, expected lines) pairs."""
    found = []
    for block in FENCE.findall(markdown):
        lines = block.rstrip("\n").splitlines()
        if not lines or not lines[0].startswith("$ "):
            continue
        steps: list[tuple[str, list[str]]] = []
        for line in lines:
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
        found.append(steps)
    return found


def mask(line: str) -> str:
    return DURATION.sub("<t>s", line.rstrip())


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line after masking; an ``...`` line matches any run of lines, none included."""
    want = [mask(line) for line in expected]
    got = [mask(line) for line in actual]

    def walk(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i] == ELLIPSIS:
            return any(walk(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and want[i] == got[j] and walk(i + 1, j + 1)

    return walk(0, 0)


def _scratch(tmp: Path) -> Path:
    for name in SHARED:
        (tmp / name).symlink_to(ROOT / name)
    return tmp


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("KUBECONFIG", None)
    env["KUBECONFIG"] = "/nonexistent/kubeconfig"  # `kubectl get` finds no cluster, as documented
    env["COLUMNS"] = "80"
    return env


def _needs(command: str) -> str | None:
    """What a command needs that may be missing here, or None."""
    if re.search(r"(^|[|;&(]\s*)kubectl\s+(kustomize|redis-placer)", command) and not shutil.which(
        "kubectl"
    ):
        return "kubectl is not on the PATH"
    return None


PAGE_SESSIONS = [(page, sessions(page.read_text(encoding="utf-8"))) for page in PAGES]


MARK = "=== end of a documented command ==="


def run_session(commands: list[str], cwd: Path) -> list[list[str]]:
    """Run the commands in one bash, in order (so ``$?`` and files carry over as in a terminal),
    stdin closed; each command's stdout and stderr together, as lines."""
    script = "".join(
        f"{command}\n__status=$?; printf '\\n%s\\n' '{MARK}'; (exit $__status)\n"
        for command in commands
    )
    (cwd / ".session.sh").write_text(script, encoding="utf-8")
    done = subprocess.run(
        ["bash", ".session.sh"],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    chunks = done.stdout.split(f"\n{MARK}\n")
    assert len(chunks) == len(commands) + 1, done.stdout[-2000:]
    return [chunk.splitlines() for chunk in chunks[:-1]]


@pytest.mark.parametrize(
    "page", [p for p, found in PAGE_SESSIONS if found], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_session_of_the_page_prints_what_it_says(page: Path, tmp_path: Path) -> None:
    steps = [step for block in sessions(page.read_text(encoding="utf-8")) for step in block]
    outputs = run_session([command for command, _ in steps], _scratch(tmp_path))
    unchecked = {command: why for command, _ in steps if (why := _needs(command))}
    if len(unchecked) == len(steps):
        pytest.skip("; ".join(f"{c}: {w}" for c, w in unchecked.items()))
    failures = [
        f"$ {command}\n--- the page says:\n"
        + "\n".join(expected)
        + "\n--- it prints:\n"
        + "\n".join(actual)
        for (command, expected), actual in zip(steps, outputs, strict=True)
        if command not in unchecked and not matches(expected, actual)
    ]
    assert not failures, "\n\n".join(failures)


def test_the_readme_and_the_guides_hold_sessions() -> None:
    """The pages a new user reads first show what the tool prints, so they are checked here."""
    counted = {p.relative_to(ROOT).as_posix(): len(found) for p, found in PAGE_SESSIONS}
    assert counted["README.md"] >= 4
    for guide in ("plan", "what-if", "rebalance"):
        assert counted[f"docs/guides/{guide}.md"] >= 1, guide


def test_the_matcher_masks_durations_and_takes_an_ellipsis_for_any_lines() -> None:
    assert matches(["solved in 0.07s", "...", "end"], ["solved in 1.52s", "a", "b", "end"])
    assert matches(["a", "...", "b"], ["a", "b"])
    assert not matches(["a", "b"], ["a", "c"])
    assert not matches(["a"], ["a", "extra"])
    assert not matches(["...", "z"], ["a", "b"])


DUMP = re.compile(r"kubectl get (\S*nodes\S*)")


def test_one_dump_command_everywhere_and_it_reads_what_the_tool_reads() -> None:
    """Every `kubectl get nodes...` in the docs, the examples and the code lists the same
    resources: those the live reader lists (placer.inputs.live), named by DUMP_RESOURCES."""
    from placer.inputs.content import DUMP_RESOURCES
    from placer.inputs.live import snapshot_from_adapter
    from placer.kube.fake import FakeKubeAdapter

    files = [*PAGES, *(ROOT / "placer").rglob("*.py"), *(ROOT / "placer").rglob("*.yaml")]
    files += [*(ROOT / "models").rglob("*.py"), *(ROOT / "deploy").rglob("*.yaml")]
    found = {
        (path.relative_to(ROOT).as_posix(), match)
        for path in files
        for match in DUMP.findall(path.read_text(encoding="utf-8"))
    }
    assert len(found) >= 8
    assert {resources for _, resources in found} == {DUMP_RESOURCES}, sorted(found)

    listed: list[str] = []

    class Recording:
        """The fake adapter, noting each list the reader asks for."""

        def __init__(self) -> None:
            self.inner = FakeKubeAdapter()

        def __getattr__(self, name: str) -> object:
            if name.startswith("list_"):
                listed.append(name)
            return getattr(self.inner, name)

    snapshot_from_adapter(Recording(), Policy(), allow_empty=True)  # type: ignore[arg-type]
    kinds = {
        "list_nodes": "nodes",
        "list_pods": "pods",
        "list_statefulsets": "statefulsets",
        "list_volume_objects": "pv,pvc,storageclasses",
    }
    assert ",".join(kinds[name] for name in listed) == DUMP_RESOURCES


WRITTEN = re.compile(
    r"(?:(?<![0-9&>-])>|\btee(?: -a)?)\s+([\w.][\w./-]*)|\bmkdir -p\s+([\w.][\w./-]*)"
)
"""A file a command line writes (``> FILE``, ``tee FILE``), or a folder it makes."""


def test_what_the_pages_examples_write_in_the_checkout_git_ignores() -> None:
    """A reader who runs the examples from the checkout is left with no untracked files."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    written = sorted(
        {
            path
            for page in PAGES
            for block in FENCE.findall(page.read_text(encoding="utf-8"))
            for line in block.splitlines()
            if not line.startswith("#")
            for file, folder in WRITTEN.findall(line)
            for path in [file or f"{folder}/"]
        }
    )
    assert {"dump.yaml", "my-install/", "plan.json", "policy.yaml", "survive.yaml"} <= set(written)
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *written],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    not_ignored = [
        line.split("\t")[-1] for line in done.stdout.splitlines() if line.startswith("::")
    ]
    assert not not_ignored, not_ignored
