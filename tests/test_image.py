"""The image, built by deploy/image/build.sh and run as the manifests run it: uid 10001, a
read-only root filesystem, /tmp a scratch mount (tests/container.py). The binder in the image
against a real API server: tests/e2e/test_image_e2e.py."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import container
from tests.container import Image

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "placer" / "examples"
LEFT_OUT = ("pandas", "aiohttp", "kubernetes.aio")


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not line.startswith("#"):
            pins[_normal(name)] = version
    return pins


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def on_host(*args: str) -> subprocess.CompletedProcess[str]:
    """The same command from this checkout, for comparison."""
    return subprocess.run(
        [sys.executable, "-m", "placer.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )


def test_the_image_is_configured_as_the_manifests_expect(image: Image) -> None:
    config = image.config
    assert config["Entrypoint"] == ["redis-placer"] and config["Cmd"] == ["--help"]
    assert config["User"] == "10001:10001"  # numeric: runAsNonRoot can check it
    assert config["WorkingDir"] == "/tmp"
    assert "9090/tcp" in config.get("ExposedPorts", {})


def test_it_runs_as_10001_on_a_read_only_root_with_a_writable_tmp(image: Image) -> None:
    probe = (
        "import os, sys; print(os.getuid(), os.getgid(), os.getgroups(), os.getcwd()); "
        "open('/tmp/scratch', 'w').write('ok'); print(open('/tmp/scratch').read()); "
        "open(sys.argv[1], 'w')"
    )
    as_user = container.run(image, ["-c", probe, "/opt/x"], entrypoint=["python3"])
    assert as_user.stdout.splitlines() == ["10001 10001 [10001] /tmp", "ok"], as_user
    assert "Read-only file system" in as_user.stderr, as_user
    # Not even root may write there (root could on a writable one): the mount is read-only.
    as_root = container.run(image, ["-c", probe, "/opt/x"], entrypoint=["python3"], user="0:0")
    assert "Read-only file system" in as_root.stderr, as_root


def test_demo_says_what_it_says_on_the_host(image: Image) -> None:
    """The README's first command, in the image: the same plans and drills as on the host
    (the solve is deterministic), durations aside."""
    demo = container.run(image, ["demo"])
    assert demo.code == 0, demo
    host = on_host("demo")
    assert host.returncode == 0, host.stderr
    assert _timeless(demo.stdout) == _timeless(host.stdout)
    assert "survives losing a zone" in demo.stdout
    print(f"\ndemo in the image: {demo.seconds:.1f}s")


def _timeless(text: str) -> str:
    return re.sub(r"\b\d+(?:\.\d+)?s\b", "<t>s", text)


def test_rebalance_of_a_dump_says_what_it_says_on_the_host(image: Image) -> None:
    args = ["rebalance", "-f", "/data/rebalance.yaml"]
    inside = container.run(image, args, mounts={"/data": EXAMPLES})
    outside = on_host("rebalance", "-f", str(EXAMPLES / "rebalance.yaml"))
    assert (inside.code, inside.stdout) == (outside.returncode, outside.stdout), inside
    assert "1. failover  shard redis/cache/1" in inside.stdout
    assert "dry run: pass --apply to perform these changes" in inside.stdout


def test_dependencies_are_the_constraints_and_what_is_never_imported_is_left_out(
    image: Image,
) -> None:
    listing = (
        "import importlib.metadata as m, importlib.util as u, json; "
        "print(json.dumps({'dists': {d.metadata['Name']: d.version for d in m.distributions()}, "
        f"'found': [n for n in {list(LEFT_OUT)!r} if u.find_spec(n.split('.')[0]) and "
        "(n.count('.') == 0 or u.find_spec(n))]}))"
    )
    out = container.run(image, ["-c", listing], entrypoint=["python3"])
    assert out.code == 0, out
    found = json.loads(out.stdout)
    assert found["found"] == [], "left out of the image, yet there"
    pins = constraints()
    dists = {_normal(name): version for name, version in found["dists"].items()}
    assert dists.pop("redis-placer") == "0.1.0"
    unpinned = {name: v for name, v in dists.items() if pins.get(name) != v}
    assert unpinned == {}, "installed at versions constraints.txt does not pin"
    assert {"ortools", "kubernetes", "pydantic", "numpy"} <= set(dists)
    assert not {"pip", "setuptools"} & set(dists)


@pytest.mark.parametrize("command", ["binder", "rebalance", "release-gates"])
def test_every_in_cluster_command_starts(image: Image, command: str) -> None:
    """--help loads the command's module and what it imports, without a cluster."""
    out = container.run(image, [command, "--help"])
    assert out.code == 0 and out.stdout.startswith(f"Usage: redis-placer {command}"), out
