"""Edges a user meets without meaning to: output that cannot be written, a cluster where no
Redis pod runs yet, pods whose nodes the dump lacks, a pod that has finished. Each ends in one
plain line or a verdict that says what it is, never a traceback or a healthy report."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from models.policy import Policy
from placer.cli import main
from placer.commands.options import overrun

EXAMPLE = Path(__file__).resolve().parent.parent / "placer" / "examples" / "cluster.yaml"
ROOT = EXAMPLE.parent.parent.parent


def _cli(*args: str, **streams: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "placer.cli", *args],
        cwd=ROOT,
        text=True,
        timeout=120,
        check=False,
        **streams,  # type: ignore[call-overload]
    )


def _dump(tmp_path: Path, change: object) -> Path:
    """The bundled example with ``change(items)`` applied, written to a file."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    change(doc["items"])  # type: ignore[operator]
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _pods(items: list[dict]) -> list[dict]:
    return [o for o in items if o["kind"] == "Pod"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_full_disk_ends_in_one_line_and_exit_2_not_a_traceback() -> None:
    with open("/dev/full", "w") as full:
        done = _cli("plan", "-f", str(EXAMPLE), "-o", "json", stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: cannot write the output: [Errno 28] No space left on device"
    ]


def test_a_closed_stdout_is_a_reader_gone_not_a_traceback() -> None:
    done = _cli("audit", "-f", str(EXAMPLE), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    code = (
        "import subprocess, sys; "
        "p = subprocess.run([sys.executable, '-m', 'placer.cli', 'audit', '-f', sys.argv[1]], "
        "stdout=None, stderr=subprocess.PIPE, text=True, close_fds=True, "
        "preexec_fn=lambda: __import__('os').close(1)); "
        "sys.stderr.write(p.stderr); sys.exit(p.returncode)"
    )
    closed = subprocess.run(
        [sys.executable, "-c", code, str(EXAMPLE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in closed.stderr
    assert closed.returncode == done.returncode


def test_audit_and_rebalance_of_a_cluster_where_nothing_runs_yet_judge_nothing(
    tmp_path: Path,
) -> None:
    def all_pending(items: list[dict]) -> None:
        for pod in _pods(items):
            pod["spec"].pop("nodeName", None)
            pod["status"] = {"phase": "Pending"}

    dump = str(_dump(tmp_path, all_pending))
    runner = CliRunner()
    for command in ("audit", "rebalance"):
        result = runner.invoke(main, [command, "-f", dump])
        assert result.exit_code == 2, (command, result.output)
        assert "no Redis pod runs yet (16 pending" in result.output
        assert "survives" not in result.output
    allowed = runner.invoke(main, ["audit", "--allow-empty", "-f", dump])
    assert allowed.exit_code == 0
    assert "survives losing one zone: nothing to judge" in allowed.output
    assert ": yes" not in allowed.output
    assert runner.invoke(main, ["plan", "-f", dump]).exit_code == 0  # plan places them


def test_a_shard_lost_before_any_failure_is_named_once_not_blamed_on_every_host(
    tmp_path: Path,
) -> None:
    def shard_0_on_a_gone_node(items: list[dict]) -> None:
        for pod in _pods(items):
            if pod["metadata"]["name"].startswith("cache-0-"):
                pod["spec"]["nodeName"] = "gone"

    result = CliRunner().invoke(main, ["audit", "-f", str(_dump(tmp_path, shard_0_on_a_gone_node))])
    verdict = [line for line in result.output.splitlines() if line.startswith("survives")]
    assert len(verdict) == 3
    for line in verdict:
        assert "NO: lost already, before any failure" in line
        assert "shard(s) redis/cache/0 have no member on a node of the snapshot" in line
        assert "takes every member" not in line
    assert "bound to node 'gone'" in result.output


def test_a_redis_pod_that_has_finished_is_said_not_dropped(tmp_path: Path) -> None:
    def finish_shard_0(items: list[dict]) -> None:
        for pod in _pods(items):
            if pod["metadata"]["name"].startswith("cache-0-"):
                pod["status"] = {"phase": "Failed"}

    result = CliRunner().invoke(main, ["plan", "-f", str(_dump(tmp_path, finish_shard_0))])
    assert "has finished (Failed): not a member until it runs again" in result.output
    assert "redis/cache-0-0" in result.output


def test_a_command_past_its_time_limit_says_so() -> None:
    now = time.monotonic()
    late = overrun(now - 2.5, now - 1.5, 2.0, Policy())
    assert late == [
        "took 2.50 s, beyond its 2 s time limit: starting and reading the input took 1.00 s "
        "of it; give it more time (--time-limit)"
    ]
    assert overrun(now - 2.5, now - 1.5, None, Policy()) == []  # the policy's 10 s
    on_time = CliRunner().invoke(main, ["plan", "-f", str(EXAMPLE), "--time-limit", "30"])
    assert on_time.exit_code == 0
    assert "time limit" not in on_time.output
