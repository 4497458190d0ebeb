"""deploy/examples/form-cluster.sh against six real redis-server processes.

The script runs as written; ``kubectl`` on its PATH is a stand-in that answers from a list of
pods (names, labels, pod IPs) and runs ``kubectl exec POD -- redis-cli ...`` as redis-cli
against that pod's server on its own loopback address. The roles are the binder's labels, not
the pods' ordinals (shard 1's master is its second pod), and the formed cluster must match them.
"""

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_harness import (
    DEFAULT_IPS,
    RedisClusterHarness,
    pick_port,
    redis_binaries_missing,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "deploy" / "examples" / "form-cluster.sh"
MASTER_MEMBER = {0: 0, 1: 1, 2: 0}
"""Per shard, the member the binder made master."""

FAKE_KUBECTL = r'''#!PYTHON
"""kubectl, as far as form-cluster.sh uses it, over the pods in $FAKE_PODS."""
import json, os, subprocess, sys

pods = json.load(open(os.environ["FAKE_PODS"]))
args = sys.argv[1:]
if args[:1] == ["-n"]:
    args = args[2:]


def select(selector):
    wanted = dict(term.split("=", 1) for term in selector.split(","))
    return [p for p in pods if all(p["labels"].get(k) == v for k, v in wanted.items())]


def by_name(name):
    return next(p for p in pods if p["name"] == name)


verb = args[0]
if verb == "wait":
    sys.exit(0)
if verb == "get" and args[1] == "pods":
    chosen = select(args[args.index("-l") + 1])
    print("\n".join(f"pod/{p['name']}" for p in chosen))
elif verb == "get" and args[1] == "pod":
    pod, path = by_name(args[2]), args[args.index("-o") + 1]
    if path == "jsonpath={.status.podIP}":
        print(pod["ip"], end="")
    elif path == "jsonpath={.metadata.labels.redis-shard}":
        print(pod["labels"]["redis-shard"], end="")
    else:
        sys.exit(f"fake kubectl: no {path}")
elif verb == "exec":
    pod, command = by_name(args[1]), args[args.index("--") + 1 :]
    assert command[0] == "redis-cli", command
    sys.exit(subprocess.run(["redis-cli", "-h", pod["ip"], *command[1:]]).returncode)
else:
    sys.exit(f"fake kubectl: no {args}")
'''


def _pods() -> list[dict[str, object]]:
    pods: list[dict[str, object]] = []
    for shard in range(3):
        for member in range(2):
            role = "master" if MASTER_MEMBER[shard] == member else "replica"
            labels = {"app": "redis", "redis-cluster": "redis", "redis-shard": str(shard)}
            pods.append(
                {
                    "name": f"redis-shard-{shard}-{member}",
                    "ip": DEFAULT_IPS[2 * shard + member],
                    "labels": {**labels, "redis-role": role},
                }
            )
    return pods


def _with_fake_kubectl(tmp_path: Path, pods: list[dict[str, object]]) -> dict[str, str]:
    """The environment in which ``kubectl`` is FAKE_KUBECTL over ``pods``."""
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.replace("#!PYTHON", f"#!{sys.executable}"))
    kubectl.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_PODS": str(tmp_path / "pods.json"),
    }


@pytest.mark.skipif(redis_binaries_missing() is not None, reason=str(redis_binaries_missing()))
def test_the_script_forms_the_cluster_the_binder_labelled(tmp_path: Path) -> None:
    harness = RedisClusterHarness(tmp_path / "redis")
    harness.port = pick_port(DEFAULT_IPS, random.Random(os.getpid()))
    try:
        harness._spawn_all(0)  # the servers alone: forming them is the script's job
        pods = _pods()
        env = {**_with_fake_kubectl(tmp_path, pods), "REDIS_PORT": str(harness.port)}
        done = subprocess.run(
            ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "[OK] All 16384 slots covered." in done.stdout
        ip_of = {str(p["name"]): str(p["ip"]) for p in pods}
        expected = {
            ip_of[f"redis-shard-{s}-{MASTER_MEMBER[s]}"]: ip_of[
                f"redis-shard-{s}-{1 - MASTER_MEMBER[s]}"
            ]
            for s in range(3)
        }

        def layout_matches() -> str | None:
            layout = harness.layout()
            return None if layout == expected else f"master -> replica {layout}, not {expected}"

        wait_until(layout_matches, 30.0, "each replica to follow its own shard's master")
        again = subprocess.run(
            ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120
        )
        assert again.returncode == 0 and "formed already" in again.stdout
    finally:
        harness.stop()


def test_help_prints_the_usage_and_asks_kubectl_nothing(tmp_path: Path) -> None:
    env = _with_fake_kubectl(tmp_path, [])
    (tmp_path / "bin" / "kubectl").write_text("#!/bin/sh\necho kubectl was called >&2\nexit 99\n")
    for flag in ("--help", "-h"):
        done = subprocess.run(["bash", str(SCRIPT), flag], env=env, capture_output=True, text=True)
        assert (done.returncode, done.stderr) == (0, ""), done
        assert done.stdout.startswith(
            "usage: form-cluster.sh [--timeout SECONDS] [NAMESPACE [CLUSTER [SHARDS]]]\n"
        ), done.stdout
    wrong = subprocess.run(
        ["bash", str(SCRIPT), "--namespace", "redis"], env=env, capture_output=True, text=True
    )
    assert wrong.returncode == 2 and wrong.stdout == "", wrong
    assert wrong.stderr.startswith("form-cluster.sh: unknown option --namespace\nusage:"), wrong


def test_the_wait_for_the_binder_is_bounded_and_says_what_it_waited_for(tmp_path: Path) -> None:
    """No pod has a role label yet (the binder has not placed them): with --timeout 0 the
    first look is the last, and the script says what it found missing."""
    unlabelled = _pods()
    for pod in unlabelled:
        labels = pod["labels"]
        assert isinstance(labels, dict)
        del labels["redis-role"]
    env = _with_fake_kubectl(tmp_path, unlabelled)
    done = subprocess.run(
        ["bash", str(SCRIPT), "--timeout", "0", "redis", "redis", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    assert done.stdout == (
        "waiting up to 0 s for 3 pods labelled redis-role=master by the binder "
        "(app=redis,redis-cluster=redis in namespace redis)\n"
    )
    assert done.stderr == (
        "form-cluster.sh: gave up after 0 s: 0 of 3 pods (app=redis,redis-cluster=redis) in "
        "namespace redis are labelled redis-role=master; has the binder placed them?\n"
    )


def test_no_output_is_piped_into_a_reader_that_may_stop_early() -> None:
    """Under ``set -o pipefail`` a writer whose reader has exited (``head``, ``grep -q``) dies
    of SIGPIPE when its output comes in more than one write, as bash's echo writes line by
    line, and the script ends with 141 when the reader wins the race."""
    early = re.compile(r"\|\s*(head\b|grep\s+(-\w*[qml]|--quiet|--silent|--max-count|--files))")
    lines = SCRIPT.read_text().splitlines()
    found = [f"{n}: {line}" for n, line in enumerate(lines, 1) if early.search(line)]
    assert not found, found
