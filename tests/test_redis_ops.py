"""placer.redis.ops against real redis-server processes (and its parser on exact text)."""

from __future__ import annotations

import re
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from placer.redis.ops import (
    ClusterNodesParseError,
    FailoverRefused,
    FailoverTimeout,
    NotAReplica,
    PasswordSourceError,
    RedisAuthError,
    RedisEndpoint,
    RedisUnreachable,
    cluster_info,
    failover_to,
    info_replication,
    parse_cluster_nodes,
    password_from_env_or_file,
    read_cluster_nodes,
)

if TYPE_CHECKING:  # imported for real by pytest_plugins, so asserts get rewritten
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]

UNUSED_IP = "127.0.0.9"  # loopback, but no server: connection refused at once

NODES_TEXT = """\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-d slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 1426238316232 1426238315222 3 disconnected 10923-16383
6ec23923021cf3ffec47632106199cb7f496ce01 2001:db8::7:30005@31005 slave,fail? 67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 0 1426238316232 5 connected
824fe116063bc5fcf9f4ffd895bc17aee7731ac3 :0@0 handshake,noaddr - 0 0 0 disconnected
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5459 5460 [5461->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [93-<-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
"""


# -- pure: parser, endpoint, password source -----------------------------------------------


def test_parse_cluster_nodes_reads_every_field_exactly() -> None:
    nodes = {n.node_id[:4]: n for n in parse_cluster_nodes(NODES_TEXT)}
    assert len(nodes) == 6

    replica = nodes["07c3"]
    assert (replica.ip, replica.port, replica.bus_port, replica.hostname) == (
        "127.0.0.1",
        30004,
        31004,
        "host-d",
    )
    assert replica.role == "replica"
    assert replica.master_id == "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"
    assert replica.healthy and replica.slots == () and replica.config_epoch == 4

    assert nodes["67ed"].role == "master" and nodes["67ed"].master_id is None
    assert nodes["67ed"].slots == ((5461, 10922),)

    failed = nodes["292f"]
    assert failed.failed and not failed.connected and not failed.healthy

    v6 = nodes["6ec2"]
    assert (v6.ip, v6.port, v6.address) == ("2001:db8::7", 30005, "[2001:db8::7]:30005")
    assert v6.suspected and not v6.failed and v6.role == "replica"

    noaddr = nodes["824f"]
    assert (noaddr.ip, noaddr.port, noaddr.role) == ("", 0, "unknown")
    assert noaddr.handshake and not noaddr.healthy

    me = nodes["e7d1"]
    assert me.myself and me.role == "master"
    # Migrating/importing entries are not owned slots.
    assert me.slots == ((0, 5459), (5460, 5460))
    assert me.slot_count == 5461


@pytest.mark.parametrize(
    "line",
    [
        "abc 127.0.0.1:1@2 master - 0 0",  # too few fields
        "abc 127.0.0.1@2 master - 0 0 1 connected",  # no port
        "abc 127.0.0.1:1@2 master - 0 0 1 connected 9-x",  # bad slot
        "abc 127.0.0.1:1@2 master - 0 0 1 connected 0-16384",  # slot out of range
    ],
)
def test_parse_cluster_nodes_rejects_malformed_lines(line: str) -> None:
    with pytest.raises(ClusterNodesParseError, match=re.escape("redis 10.0.0.1:6379")):
        parse_cluster_nodes(line, RedisEndpoint(host="10.0.0.1"))


def test_endpoint_masks_password_everywhere() -> None:
    ep = RedisEndpoint(host="10.1.2.3", port=6380, password="hunter2-secret")
    assert str(ep) == ep.address == "10.1.2.3:6380"
    for text in (repr(ep), str(ep), ep.model_dump_json(), f"{ep}", str(ep.model_dump())):
        assert "hunter2-secret" not in text
    assert ep.password is not None and ep.password.get_secret_value() == "hunter2-secret"
    assert RedisEndpoint(host="fd00::1", port=7000).address == "[fd00::1]:7000"


def test_password_from_env_or_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text("from-file\n")
    monkeypatch.setenv("RP_TEST_PW", "from-env")
    assert password_from_env_or_file("RP_TEST_PW", str(secret_file)) == "from-env"
    monkeypatch.setenv("RP_TEST_PW", "")  # set but empty: fall through to the file
    assert password_from_env_or_file("RP_TEST_PW", str(secret_file)) == "from-file"
    monkeypatch.delenv("RP_TEST_PW")
    assert password_from_env_or_file("RP_TEST_PW", None) is None
    assert password_from_env_or_file(None, None) is None
    with pytest.raises(PasswordSourceError, match="nope"):
        password_from_env_or_file(None, str(tmp_path / "nope"))


# -- real cluster -------------------------------------------------------------------------


def restore_layout(h: RedisClusterHarness, original: dict[str, str]) -> None:
    """Fail back so the shared cluster leaves a test as it came in.

    Waits for every node to agree first: voters that still see the old master as a
    master refuse to vote for it, and the fail-back would never land.
    """
    h.wait_healthy()
    for master_ip in original:
        failover_to(h.endpoint(master_ip), timeout_s=20)  # no-op when already master
    h.wait_healthy()
    assert h.layout() == original


@pytest.mark.redis
def test_read_cluster_nodes_maps_six_nodes(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    layout = h.layout()
    for ip in h.ips:
        nodes = read_cluster_nodes(h.endpoint(ip))
        assert len(nodes) == 6
        by_id = {n.node_id: n for n in nodes}
        assert [n.ip for n in nodes if n.myself] == [ip]
        assert all(n.port == h.port and n.bus_port == h.port + 10000 for n in nodes)
        assert all(n.healthy for n in nodes)
        masters = [n for n in nodes if n.role == "master"]
        replicas = [n for n in nodes if n.role == "replica"]
        assert len(masters) == 3 and len(replicas) == 3
        # Masters own every slot exactly once; replicas own none.
        owned = sorted(s for m in masters for lo, hi in m.slots for s in range(lo, hi + 1))
        assert owned == list(range(16384))
        assert all(r.slots == () for r in replicas)
        # Each replica follows a master, one replica per master, and redis-py agrees.
        mine = {by_id[r.master_id].ip: r.ip for r in replicas if r.master_id}
        assert mine == layout
        view = h.view(ip)
        assert {v["node_id"] for v in view.values()} == set(by_id)
        assert {a.split(":")[0]: v["node_id"] for a, v in view.items()} == {
            n.ip: n.node_id for n in nodes
        }


@pytest.mark.redis
def test_cluster_info_and_replication_info(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    info = cluster_info(h.endpoint(h.ips[0]))
    assert info["cluster_state"] == "ok"
    assert info["cluster_known_nodes"] == "6" and info["cluster_size"] == "3"
    master, replica = next(iter(h.layout().items()))
    assert info_replication(h.endpoint(master))["role"] == "master"
    repl = info_replication(h.endpoint(replica))
    assert (repl["role"], repl["master_host"], repl["master_link_status"]) == (
        "slave",
        master,
        "up",
    )


@pytest.mark.redis
def test_unreachable_endpoint_is_clear_and_fast(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    before = h.layout()
    ep = RedisEndpoint(host=UNUSED_IP, port=h.port, password="never-shown")
    for call in (lambda: read_cluster_nodes(ep, 1.0), lambda: failover_to(ep, timeout_s=1.0)):
        started = time.monotonic()
        with pytest.raises(RedisUnreachable) as err:
            call()
        assert time.monotonic() - started < 1.5
        message = str(err.value)
        assert f"{UNUSED_IP}:{h.port}" in message and "unreachable" in message
        assert "\n" not in message and "never-shown" not in message
    assert h.layout() == before


@pytest.mark.redis
def test_failover_to_master_is_a_no_op(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    before = h.layout()
    master, replica = next(iter(before.items()))
    result = failover_to(h.endpoint(master), timeout_s=5)
    assert not result.performed
    assert result.new_master_id == h.node_id(master)
    assert result.old_master_id == h.node_id(replica)
    assert h.layout() == before


@pytest.mark.redis
def test_failover_to_wrong_master_is_not_a_replica(
    redis_cluster_shared: RedisClusterHarness,
) -> None:
    h = redis_cluster_shared
    before = h.layout()
    (m1, r1), (m2, _) = list(before.items())[:2]
    with pytest.raises(NotAReplica) as err:
        failover_to(h.endpoint(r1), timeout_s=5, expected_master_id=h.node_id(m2))
    assert f"{r1}:{h.port}" in str(err.value) and h.node_id(m1) in str(err.value)
    assert h.layout() == before


@pytest.mark.redis
def test_failover_refused_when_replica_cannot_catch_up(
    redis_cluster_shared: RedisClusterHarness,
) -> None:
    h = redis_cluster_shared
    before = h.layout()
    _, replica = next(iter(before.items()))
    h.cut_replication_link(replica)
    try:
        with pytest.raises(FailoverRefused, match="replication link to the master is down"):
            failover_to(h.endpoint(replica), timeout_s=5)
        assert h.layout() == before  # nothing was sent: roles unchanged
    finally:
        h.heal_replication_link(replica)
    assert h.layout() == before


@pytest.mark.redis
def test_failover_to_promotes_and_settles(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    before = h.layout()
    master, replica = next(iter(before.items()))
    try:
        result = failover_to(h.endpoint(replica), timeout_s=20, poll_s=0.05)
        assert result.performed and result.seconds < 20
        assert result.new_master_id == h.node_id(replica)
        assert result.old_master_id == h.node_id(master)
        # Settled on return, checked independently of redis_ops: no extra wait here.
        assert h.layout(replica)[replica] == master
        old = h.info_replication(master)
        assert (old["role"], old["master_host"], old["master_link_status"]) == (
            "slave",
            replica,
            "up",
        )
        again = failover_to(h.endpoint(replica), timeout_s=5)
        assert not again.performed
    finally:
        restore_layout(h, before)


@pytest.mark.redis
def test_failover_timeout_names_the_endpoint(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    before = h.layout()
    # Not the shard other tests fail over: masters refuse to vote twice for one
    # shard within 2 x node-timeout, which would make this failover never land.
    master, replica = list(before.items())[2]
    try:
        with pytest.raises(FailoverTimeout) as err:
            failover_to(h.endpoint(replica), timeout_s=0.0)
        message = str(err.value)
        assert f"{replica}:{h.port}" in message and "did not complete within 0s" in message
        assert "last seen:" in message
    finally:
        # Redis still honours the accepted request: let it land, then fail back.
        swapped = {m: r for m, r in before.items() if m != master} | {replica: master}
        h.wait_layout(swapped)
        restore_layout(h, before)
    assert cluster_info(h.endpoint(replica))["cluster_state"] == "ok"


@pytest.mark.redis
def test_auth_errors_are_clear_and_never_show_the_password(
    redis_cluster_auth: RedisClusterHarness, redis_password: str
) -> None:
    h = redis_cluster_auth
    ip = h.ips[0]
    wrong = "wrong-" + redis_password[::-1]
    cases = {"WRONGPASS": wrong, "NOAUTH": ""}
    for label, pw in cases.items():
        ep = RedisEndpoint(host=ip, port=h.port, password=pw or None)
        with pytest.raises(RedisAuthError) as err:
            read_cluster_nodes(ep)
        text = "".join(traceback.format_exception(err.value)) + repr(err.value)
        assert f"{ip}:{h.port}" in str(err.value), label
        assert "authentication failed" in str(err.value) and label in str(err.value)
        assert redis_password not in text and wrong not in text, label
    # The right password works, including a failover (masterauth path, old master INFO).
    good = h.endpoint(ip)
    assert len(read_cluster_nodes(good)) == 6
    master, replica = next(iter(h.layout().items()))
    result = failover_to(h.endpoint(replica), timeout_s=20)
    assert result.performed and h.layout(replica)[replica] == master
