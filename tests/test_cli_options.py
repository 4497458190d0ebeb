"""The command line's shared conventions, as kubectl has them: ``-n`` narrows to a namespace,
``-o json|yaml`` wherever something is printed, help on every option, a hint for a mistyped
command, and no Kubernetes client imported where no cluster is read."""

import subprocess
import sys
import textwrap

import pytest

from tests.test_cli_contract import ROOT

EXAMPLE = str(ROOT / "placer" / "examples" / "three-zones.yaml")


@pytest.mark.parametrize(
    "args",
    [
        ["pdbs", "-f", EXAMPLE],
        ["audit", "-f", EXAMPLE],
        ["drill", "-f", EXAMPLE],
        ["rebalance", "-f", EXAMPLE, "--time-limit", "5"],
    ],
    ids=lambda a: a[0],
)
def test_a_command_on_a_dump_imports_no_kubernetes_client(args: list[str]) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from click.testing import CliRunner
        from placer.cli import main
        result = CliRunner().invoke(main, {args!r})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        print(result.exit_code, "kubernetes" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    code_, imported = done.stdout.split()
    assert code_ in ("0", "1"), done.stdout
    assert imported == "False"
