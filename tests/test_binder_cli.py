"""The ``binder`` command's surface: both modes documented, a bad kubeconfig is one clear error."""

from pathlib import Path

from click.testing import CliRunner

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


def test_each_command_module_can_be_imported_first() -> None:
    """The command modules import the CLI's shared options; no import order may break."""
    import subprocess
    import sys

    for module in ("placer.binder.command", "placer.rebalance.command"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True
        )
        assert done.returncode == 0, (module, done.stderr)
