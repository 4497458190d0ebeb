"""The image against a real API server, as deploy/ runs it: deploy/ applied with kubectl; the
binder's container (its command, args, env and mounts from the rendered Deployment) run from
the image as uid 10001 on a read-only root, in-cluster with a token the API server issued
to its ServiceAccount, so only deploy/'s RBAC stands behind it; it places a shard. Then one
run of the rebalance CronJob's container, with its own ServiceAccount, reads what it placed."""

import re
import urllib.request
from pathlib import Path

import pytest

from tests import container
from tests.container import Image
from tests.e2e import install
from tests.e2e.control_plane import ControlPlane, free_port

pytestmark = pytest.mark.e2e

SHARD = {"app": "redis", "redis-cluster": "redis", "redis-shard": "0"}
REDIS_NAMESPACE = "redis"  # the namespace deploy/components/redis-namespaces lists as shipped
BIND_WITHIN = 120.0


def test_the_binder_in_the_image_places_a_shard_and_rebalance_reads_it(
    fresh_control_plane: ControlPlane, image: Image, tmp_path: Path, run_id: str
) -> None:
    plane = fresh_control_plane
    api = plane.api_client()
    docs = install.render(".")
    install.install(plane, docs)
    policy = install.readable_dir(
        tmp_path / "policy", install.one(docs, "ConfigMap", "redis-placer-policy")["data"]
    )
    nodes = install.zone_nodes(api, run_id)
    for i in range(2):
        install.redis_pod(
            api, REDIS_NAMESPACE, f"redis-0-{i}", SHARD, run_id, scheduler_name="redis-placer"
        )

    binder = install.container_of(docs, "Deployment")
    assert binder["command"] == ["redis-placer"] == image.config["Entrypoint"]
    port = free_port()  # the host's network: 9090 may be taken
    args = [str(port) if a == "9090" else a for a in binder["args"]]
    assert args != binder["args"] and "--leader-elect" in args
    mounts = {
        "/etc/redis-placer": policy,
        install.SERVICE_ACCOUNT_DIR: install.service_account_dir(
            plane, "redis-placer-binder", tmp_path / "binder-token"
        ),
    }
    log = tmp_path / "binder.log"
    process = container.start(
        image,
        args,
        log,
        env=install.in_cluster_env(plane, "redis-placer-binder-0"),
        mounts=mounts,
    )
    try:

        def bound() -> bool:
            assert process.poll() is None, f"the binder exited:\n{log.read_text()[-4000:]}"
            placed = install.pods(api, REDIS_NAMESPACE)
            return all((p.get("spec") or {}).get("nodeName") for p in placed.values())

        install.wait_for(bound, "both pods of the shard bound by the binder", BIND_WITHIN)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
    finally:
        code = container.stop(process)
    text = log.read_text()
    assert code == 0, f"the binder's exit on SIGTERM:\n{text[-4000:]}"

    placed = install.pods(api, REDIS_NAMESPACE)
    where = {name: p["spec"]["nodeName"] for name, p in placed.items()}
    assert len(set(where.values())) == 2 and set(where.values()) <= set(nodes), where
    roles = sorted(p["metadata"]["annotations"]["redis-placer.io/role"] for p in placed.values())
    assert roles == ["master", "replica"]
    scheduled = [e for e in install.events(api, REDIS_NAMESPACE) if e["reason"] == "Scheduled"]
    assert {e["involvedObject"]["name"] for e in scheduled} == set(placed), text[-4000:]
    assert 'redis_placer_binds_total{result="bound"} 2.0' in metrics

    cronjob = install.container_of(docs, "CronJob")
    assert cronjob["command"] == ["redis-placer"]
    rebalance = container.run(
        image,
        cronjob["args"],
        env=install.in_cluster_env(plane, "redis-placer-rebalance-0"),
        mounts={
            "/etc/redis-placer": policy,
            install.SERVICE_ACCOUNT_DIR: install.service_account_dir(
                plane, "redis-placer-rebalance", tmp_path / "rebalance-token"
            ),
        },
    )
    # One shard is one master: losing its host, rack or zone takes the cluster's master
    # majority, a soft finding under the shipped policy (survive: none), which no change can
    # remove; nothing hard, so nothing to change and exit 0.
    master = next(
        n
        for n, p in placed.items()
        if p["metadata"]["annotations"]["redis-placer.io/role"] == "master"
    )
    zone = "abc"[nodes.index(where[master])]
    lost = "leaves cluster redis/redis with 0 of 1 masters alive (needs a strict majority)"
    expected = [
        ("soft", "survive", f"losing {level} {name} {lost}")
        for level, name in (
            ("host", where[master]),
            ("rack", f"rack-{zone}"),
            ("zone", f"zone-{zone}"),
        )
    ]
    lines = rebalance.stdout.splitlines()
    rows = [m.groups() for line in lines if (m := re.match(r"(soft|hard)\s+(\S+)\s+(.*)$", line))]
    assert rebalance.code == 0, rebalance
    assert rows == expected, rebalance
    assert "no changes needed" in lines, rebalance
    assert "has 1 shard, so 1 master" in rebalance.stderr, rebalance
    print(f"\nrebalance in the image against the API server: {rebalance.seconds:.1f}s")
