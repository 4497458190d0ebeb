"""The ``binder`` command's surface: both modes documented, a bad kubeconfig is one clear error."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from placer.binder.config import SWITCH_INTERVAL
from placer.cli import main


def test_help_documents_both_modes() -> None:
    result = CliRunner().invoke(main, ["binder", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--enforce [bind|gate]" in text
    assert "pods/binding" in text and "ungated" in text


def test_unreadable_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = CliRunner().invoke(main, ["binder", "--kubeconfig", str(missing), "--no-leader-elect"])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert "error" in result.output.lower()


@pytest.fixture(autouse=True)
def _switch_interval_restored() -> Iterator[None]:
    """The binder command sets the process's switch interval: the tests' process keeps its own."""
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_binder_lets_its_computing_thread_run_longer_between_hand_overs(
    tmp_path: Path,
) -> None:
    """Set at start, before anything connects: the process is the binder's own."""
    sys.setswitchinterval(0.005)
    CliRunner().invoke(main, ["binder", "--kubeconfig", str(tmp_path / "nope")])
    assert sys.getswitchinterval() == SWITCH_INTERVAL


def test_each_command_module_can_be_imported_first() -> None:
    """The command modules import the CLI's shared options; no import order may break."""
    import subprocess
    import sys

    for module in ("placer.binder.command", "placer.rebalance.command"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True
        )
        assert done.returncode == 0, (module, done.stderr)
