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
