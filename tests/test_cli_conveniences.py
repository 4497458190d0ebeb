"""The conveniences of the command line: the default policy as a file, a policy check, the
kubectl plugin entry point and shell completion."""

import os
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from models.policy import Policy
from placer.cli import main
from tests.test_cli_contract import ROOT, one_error_line, run, three_shards, three_zones, write


def test_print_defaults_is_the_full_default_policy_and_valid_input(tmp_path: Path) -> None:
    result = run(["policy", "--print-defaults"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert Policy.model_validate(data) == Policy()
    assert data["rules"]["maxMastersPerNode"] == 1 and "schedulerName" in data  # camelCase
    assert set(data) == {f.alias or name for name, f in Policy.model_fields.items()}
    path = tmp_path / "policy.yaml"
    path.write_text(result.stdout)
    dump = write(tmp_path, three_zones() + three_shards())
    assert run(["audit", "-f", dump, "-p", str(path)]).exit_code == 0
    validated = run(["policy", "validate", "-p", str(path)])
    assert validated.exit_code == 0 and validated.stdout == f"policy {path}: valid\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("rules: {maxMasterPerNode: 2}\n", "rules.maxMasterPerNode: unknown key"),
        ("solver: {timeLimitSeconds: .inf}\n", "solver.timeLimitSeconds:"),
        ("rules: {survive: region}\n", "rules.survive:"),
        ("- a\n", "must be a mapping"),
    ],
)
def test_policy_validate_is_one_line_exit_2(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    line = one_error_line(run(["policy", "validate", "-p", str(path)]))
    assert line.startswith(f"error: policy {path}: ") and field in line


def test_policy_needs_a_flag_or_a_subcommand() -> None:
    assert "--print-defaults" in one_error_line(run(["policy"]))


def kubectl_entry_point() -> EntryPoint:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return EntryPoint("kubectl-redis_placer", scripts["kubectl-redis_placer"], "console_scripts")


def test_the_kubectl_plugin_entry_point_runs_help() -> None:
    entry = kubectl_entry_point()
    assert callable(entry.load())
    code = f"import sys; from {entry.module} import {entry.attr}; sys.exit({entry.attr}())"
    done = subprocess.run(
        [sys.executable, "-c", code, "--help"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: kubectl redis-placer [OPTIONS] COMMAND")


def test_kubectl_finds_the_plugin_on_the_path(tmp_path: Path) -> None:
    """kubectl runs ``kubectl-redis_placer`` for ``kubectl redis-placer``: a console script as
    pip writes it from the entry point, on the PATH."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on the PATH")
    entry = kubectl_entry_point()
    script = tmp_path / "kubectl-redis_placer"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        f"from {entry.module} import {entry.attr}\nsys.exit({entry.attr}())\n"
    )
    script.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        [kubectl, "redis-placer", "policy", "--print-defaults"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert Policy.model_validate(yaml.safe_load(done.stdout)) == Policy()


def test_shell_completion_is_served() -> None:
    source = CliRunner().invoke(
        main, [], prog_name="redis-placer", env={"_REDIS_PLACER_COMPLETE": "bash_source"}
    )
    assert source.exit_code == 0 and "_redis_placer_completion()" in source.stdout
    words = CliRunner().invoke(
        main,
        [],
        prog_name="redis-placer",
        env={
            "_REDIS_PLACER_COMPLETE": "bash_complete",
            "COMP_WORDS": "redis-placer re",
            "COMP_CWORD": "1",
        },
    )
    assert words.stdout.split() == ["plain,rebalance", "plain,release-gates"]


def test_progress_lines_go_to_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe or a log gets the answer alone; a person at a terminal sees the solve move."""
    import io

    from placer.commands.options import StderrProgress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, expected in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr(sys, "stderr", stream)
        with StderrProgress() as progress:
            assert (progress._thread is not None) is expected
