"""Reaching Redis with the deployment's own credentials: the password and TLS material the pods
read, found through their spec and read from their Secrets.

The pure part (placer.redis.credentials) is checked on pods shaped as each deployment's
templates make them; the command runs against real redis-server processes that serve TLS only,
require client certificates and a password, with the Secrets in an in-memory API.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from models.policy import Policy
from placer.kube.adapter import KubeApiError
from placer.kube.fake import FakeKubeAdapter
from placer.redis.access import AccessError, resolve_access
from placer.redis.credentials import (
    TLS_KEYS,
    Literal,
    PodCredentials,
    SecretRef,
    TlsRefs,
    pod_credentials,
)
from tests import operator_shapes as shapes
from tests.kube_dicts import node, redis_pod, snapshot
from tests.test_redis_roles import (
    cluster_objects,
    failed_over_behind_the_labels,
    pod_name,
    run,
)
from tests.tls_material import LeafFiles, make_authority, write_leaf

if TYPE_CHECKING:
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]


def _pod_of(deployment: str, secret: str, key: str, tls: str | None) -> dict[str, Any]:
    sts = shapes.statefulset("rc", 1, {"app": "redis"}, parallel=True)
    shapes.with_password(sts, deployment, secret, key)
    if tls:
        shapes.with_tls(sts, deployment, tls)
    return shapes.pods_of([sts])[0]


EXPECTED: dict[str, PodCredentials] = {
    "bitnami": PodCredentials(
        password=SecretRef(
            "orders-redis-cluster",
            "redis-password",
            "env REDIS_PASSWORD_FILE -> volume redis-password",
        ),
        tls=TlsRefs(
            ca=SecretRef("t", "ca.crt", "env REDIS_TLS_CA_FILE -> volume redis-certificates"),
            cert=SecretRef("t", "tls.crt", "env REDIS_TLS_CERT_FILE -> volume redis-certificates"),
            key=SecretRef("t", "tls.key", "env REDIS_TLS_KEY_FILE -> volume redis-certificates"),
        ),
    ),
    "ot-operator": PodCredentials(
        password=SecretRef("orders-redis-cluster", "redis-password", "env REDIS_PASSWORD"),
        # No CA variable unless spec.TLS.ca is set: the CA is the Secret's ca.crt.
        tls=TlsRefs(
            ca=SecretRef("t", "ca.crt", "env REDIS_TLS_CERT -> volume tls-certs"),
            cert=SecretRef("t", "tls.crt", "env REDIS_TLS_CERT -> volume tls-certs"),
            key=SecretRef("t", "tls.key", "env REDIS_TLS_CERT_KEY -> volume tls-certs"),
        ),
    ),
    "hyperspike": PodCredentials(
        password=SecretRef("orders-redis-cluster", "redis-password", "env REDISCLI_AUTH"),
        tls=TlsRefs(*(SecretRef("t", k, "volume valkey-tls") for k in TLS_KEYS)),
    ),
    "valkey-io": PodCredentials(
        password=SecretRef("orders-redis-cluster", "redis-password", "env VALKEYCLI_AUTH"),
        username=Literal("_operator", "env VALKEY_USER"),
        tls=TlsRefs(
            ca=SecretRef("t", "ca.crt", "env VALKEY_TLS_CA_FILE -> volume tls-certs"),
            cert=SecretRef("t", "tls.crt", "env VALKEY_TLS_CERT_FILE -> volume tls-certs"),
            key=SecretRef("t", "tls.key", "env VALKEY_TLS_KEY_FILE -> volume tls-certs"),
        ),
    ),
}


@pytest.mark.parametrize("deployment", list(EXPECTED))
def test_each_deployment_leads_to_its_secrets(deployment: str) -> None:
    pod = _pod_of(deployment, "orders-redis-cluster", "redis-password", "t")
    assert pod_credentials(pod) == EXPECTED[deployment]


@pytest.mark.parametrize("deployment", list(EXPECTED))
def test_no_tls_mounted_means_no_tls(deployment: str) -> None:
    pod = _pod_of(deployment, "s", "k", None)
    assert pod_credentials(pod).tls is None


def test_a_pod_that_names_nothing_gives_nothing() -> None:
    assert pod_credentials(redis_pod("a", "c", 0, "master")) == PodCredentials()


def _spec(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "redis", **spec.pop("container", {})}], **spec}}


def test_env_from_a_secret_and_a_literal() -> None:
    whole = _spec(container={"envFrom": [{"secretRef": {"name": "all"}, "prefix": "REDIS_"}]})
    assert pod_credentials(whole).password == SecretRef(
        "all", "PASSWORD", "envFrom secret all", optional=True
    )
    literal = _spec(container={"env": [{"name": "REDIS_PASSWORD", "value": "plain"}]})
    assert pod_credentials(literal).password == Literal("plain", "env REDIS_PASSWORD")


def test_files_follow_items_sub_paths_and_projections() -> None:
    items = _spec(
        container={
            "env": [{"name": "REDIS_PASSWORD_FILE", "value": "/s/pw"}],
            "volumeMounts": [{"name": "v", "mountPath": "/s"}],
        },
        volumes=[
            {"name": "v", "secret": {"secretName": "x", "items": [{"key": "k", "path": "pw"}]}}
        ],
    )
    assert pod_credentials(items).password == SecretRef(
        "x", "k", "env REDIS_PASSWORD_FILE -> volume v"
    )
    sub = _spec(
        container={
            "env": [{"name": "REDIS_PASSWORD_FILE", "value": "/etc/pw"}],
            "volumeMounts": [{"name": "v", "mountPath": "/etc/pw", "subPath": "password"}],
        },
        volumes=[{"name": "v", "projected": {"sources": [{"secret": {"name": "y"}}]}}],
    )
    assert pod_credentials(sub).password == SecretRef(
        "y", "password", "env REDIS_PASSWORD_FILE -> volume v"
    )
    outside = _spec(
        container={
            "env": [{"name": "REDIS_PASSWORD_FILE", "value": "/elsewhere/pw"}],
            "volumeMounts": [{"name": "v", "mountPath": "/s"}],
        },
        volumes=[{"name": "v", "secret": {"secretName": "x"}}],
    )
    assert pod_credentials(outside).password is None


# -- resolving: Secrets read, errors one line --------------------------------------------------


def _members_snapshot(pod: dict[str, Any]) -> Any:
    pod["metadata"]["labels"].update({"redis-cluster": "orders", "redis-shard": "0"})
    pod["metadata"]["labels"]["redis-role"] = "master"
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": "Running", "podIP": "10.1.0.1"}
    return snapshot([node("n1", "za", "ra")], [pod])


def _resolve(
    pod: dict[str, Any],
    secrets: Mapping[tuple[str, str], Mapping[str, bytes] | Exception],
    policy: Policy | None = None,
    password: str | None = None,
) -> Any:
    snap = _members_snapshot(pod)

    def read_secret(namespace: str, name: str) -> Mapping[str, bytes] | None:
        found = secrets.get((namespace, name))
        if isinstance(found, Exception):
            raise found
        return found

    return resolve_access(
        snap,
        policy or Policy(),
        port=6379,
        password=password,
        password_source="environment variable PW",
        read_pod=lambda namespace, name: pod,
        read_secret=read_secret,
    )


def test_the_secret_s_password_reaches_the_endpoint() -> None:
    pod = _pod_of("ot-operator", "auth", "pw", None)
    dial = _resolve(pod, {("default", "auth"): {"pw": b"s3cret\n"}})
    endpoint = dial(next(iter(_members_snapshot(pod).members)))
    assert endpoint.password.get_secret_value() == "s3cret"
    assert endpoint.tls is None
    assert dial.of("default/orders").source == (
        "secret default/auth key pw (env REDIS_PASSWORD of pod default/rc-0)"
    )


def test_a_shard_the_labels_misread_is_dialled_with_its_credentials() -> None:
    """Both members labelled master (the cluster still forming when they were labelled): the
    shard is skipped, and only its Redis can say which is which, so it is dialled with the
    password its pods name, not without one."""
    pod = _pod_of("ot-operator", "auth", "pw", None)
    other = json.loads(json.dumps(pod))
    other["metadata"]["name"] = "rc-1"
    snap = _members_snapshot(pod)
    other["metadata"]["labels"].update(
        {"redis-cluster": "orders", "redis-shard": "0", "redis-role": "master"}
    )
    other["spec"]["nodeName"] = "n2"
    other["status"] = {"phase": "Running", "podIP": "10.1.0.2"}
    snap = snapshot([node("n1", "za", "ra"), node("n2", "zb", "rb")], [pod, other])
    assert not snap.members and len(snap.skipped_members) == 2
    dial = resolve_access(
        snap,
        Policy(),
        port=6379,
        read_pod=lambda namespace, name: pod,
        read_secret=lambda namespace, name: {"pw": b"s3cret"},
    )
    endpoint = dial(snap.skipped_members[0])
    assert endpoint is not None and endpoint.password is not None
    assert endpoint.password.get_secret_value() == "s3cret"


def test_a_pod_it_may_not_read_stops_only_its_own_cluster_s_credentials() -> None:
    """Pods are listed cluster-wide, but this ServiceAccount may get pods only in the
    namespaces that hold Redis: a Redis cluster elsewhere is dialled with the policy's
    credentials, said in one line naming the pod and the grant; the others keep theirs (before,
    the refused read ended the whole run with a traceback, and the guard saw no Redis at all)."""
    ours = _pod_of("ot-operator", "auth", "pw", None)
    elsewhere = json.loads(json.dumps(ours))
    elsewhere["metadata"].update(name="rc-9", namespace="team-b")
    for pod, ip in ((ours, "10.1.0.1"), (elsewhere, "10.1.0.9")):
        pod["metadata"]["labels"].update(
            {"redis-cluster": "orders", "redis-shard": "0", "redis-role": "master"}
        )
        pod["spec"]["nodeName"] = "n1"
        pod["status"] = {"phase": "Running", "podIP": ip}
    snap = snapshot([node("n1", "za", "ra")], [ours, elsewhere])
    assert {m.cluster for m in snap.members} == {"default/orders", "team-b/orders"}

    def read_pod(namespace: str, name: str) -> dict[str, Any]:
        if namespace == "team-b":
            raise KubeApiError(f"get pod {namespace}/{name}", 403, "forbidden")
        return ours

    dial = resolve_access(
        snap,
        Policy(),
        port=6379,
        read_pod=read_pod,
        read_secret=lambda namespace, name: {"pw": b"s3cret"},
    )
    password = dial.of("default/orders").password
    assert password is not None and password.get_secret_value() == "s3cret"
    assert dial.of("team-b/orders").password is None
    assert dial.issues == [
        (
            "pod team-b/rc-9",
            "cannot read it for Redis cluster team-b/orders's credentials: get pod team-b/rc-9: "
            "HTTP 403: forbidden; that cluster is dialled with the policy's credentials only "
            "(this ServiceAccount needs get on pods in namespace team-b: list it among the "
            "namespaces that hold Redis)",
        )
    ]


@pytest.mark.parametrize(
    ("secrets", "expected"),
    [
        ({}, "secret default/auth (env REDIS_PASSWORD of pod default/rc-0): not found"),
        (
            {("default", "auth"): {"other": b"x"}},
            "secret default/auth (env REDIS_PASSWORD of pod default/rc-0) has no key 'pw' "
            "(keys: other)",
        ),
        (
            {("default", "auth"): KubeApiError("get secret default/auth", 403, "forbidden")},
            "secret default/auth (env REDIS_PASSWORD of pod default/rc-0): cannot read it: "
            "get secret default/auth: HTTP 403: forbidden; the rebalance ServiceAccount needs get on "
            "that Secret in namespace default",
        ),
    ],
)
def test_a_secret_that_cannot_be_had_is_one_line(
    secrets: Mapping[tuple[str, str], Any], expected: str
) -> None:
    pod = _pod_of("ot-operator", "auth", "pw", None)
    with pytest.raises(AccessError) as caught:
        _resolve(pod, secrets)
    assert str(caught.value) == expected


def test_a_given_password_wins_and_no_secret_is_read() -> None:
    pod = _pod_of("ot-operator", "auth", "pw", None)
    dial = _resolve(pod, {}, password="given")
    assert dial.of("default/orders").password.get_secret_value() == "given"
    assert dial.of("default/orders").source == "environment variable PW"


def test_the_policy_names_the_secret_by_cluster() -> None:
    pod = _pod_of("ot-operator", "auth", "pw", None)
    policy = Policy.model_validate(
        {"redis": {"auth": {"secret": {"name": "{cluster}-auth", "key": "password"}}}}
    )
    dial = _resolve(pod, {("default", "orders-auth"): {"password": b"p"}}, policy)
    assert dial.of("default/orders").password.get_secret_value() == "p"


def test_tls_on_without_material_and_off_with_it() -> None:
    bare = _pod_of("ot-operator", "auth", "pw", None)
    on = Policy.model_validate({"redis": {"tls": {"mode": "on"}}})
    with pytest.raises(AccessError, match=r"redis\.tls\.mode is on, but neither"):
        _resolve(bare, {("default", "auth"): {"pw": b"p"}}, on)
    mounted = _pod_of("ot-operator", "auth", "pw", "tls")
    off = Policy.model_validate({"redis": {"tls": {"mode": "off"}}})
    assert (
        _resolve(mounted, {("default", "auth"): {"pw": b"p"}}, off).of("default/orders").tls is None
    )


# -- against real Redis: TLS only, client certificates, a password ----------------------------


def _with_bitnami_credentials(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods read their password file and TLS files from the chart's Secrets."""
    for obj in objs:
        if obj["kind"] == "Pod":
            holder = {"spec": {"template": {"spec": obj["spec"]}}}
            obj["spec"]["containers"] = [{"name": "redis", "image": "redis:7"}]
            shapes.with_password(holder, "bitnami", "cache-redis-cluster", "redis-password")
            shapes.with_tls(holder, "bitnami", "cache-redis-cluster-crt")
    return objs


@pytest.fixture
def tls_cluster_api(
    redis_cluster_tls: RedisClusterHarness,
    redis_password: str,
    redis_tls: LeafFiles,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[RedisClusterHarness, FakeKubeAdapter, dict[str, str], str]:
    h = redis_cluster_tls
    labelled, placement, (m1, _) = failed_over_behind_the_labels(h)
    objs = _with_bitnami_credentials(cluster_objects(h, labelled, placement))
    kube = FakeKubeAdapter(
        nodes=[o for o in objs if o["kind"] == "Node"], pods=[o for o in objs if o["kind"] == "Pod"]
    )
    kube.secrets[("default", "cache-redis-cluster")] = {"redis-password": redis_password.encode()}
    kube.secrets[("default", "cache-redis-cluster-crt")] = redis_tls.read()
    monkeypatch.setattr("placer.rebalance.command.make_adapter", lambda kubeconfig, context: kube)
    return h, kube, labelled, m1


def _labels(kube: FakeKubeAdapter) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["labels"]["redis-role"] for p in kube.list_pods()}


@pytest.mark.redis
def test_apply_over_tls_with_the_chart_s_secrets(
    tls_cluster_api: tuple[RedisClusterHarness, FakeKubeAdapter, dict[str, str], str],
    redis_password: str,
) -> None:
    """The CronJob's run, no password or TLS option given: Redis is read over TLS with the
    chart's certificate as client certificate, the stale failover is undone and the labels
    follow, each action an Event."""
    h, kube, labelled, m1 = tls_cluster_api
    result = run(["--apply", "--max-moves", "0", "--redis-port", str(h.port), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["roles"]["source"] == "redis" and len(report["roles"]["read"]) == 6
    assert [(a["kind"], a["outcome"]) for a in report["actions"]] == [
        ("failover", "ok"),
        ("relabel", "ok"),
        ("relabel", "ok"),
    ]
    h.wait_layout(labelled)
    assert _labels(kube)[pod_name(m1)] == "master"
    reasons = [(e["involvedObject"]["name"], e["reason"]) for e in kube.events]
    assert (pod_name(m1), "FailedOver") in reasons
    assert sum(1 for _, reason in reasons if reason == "RoleRelabelled") == 2
    assert redis_password not in result.output
    assert {r[1] for r in kube.secret_reads} == {"cache-redis-cluster", "cache-redis-cluster-crt"}


@pytest.mark.redis
@pytest.mark.parametrize("fault", ["wrong password", "missing secret", "foreign CA"])
def test_bad_credentials_stop_the_run_and_change_nothing(
    tls_cluster_api: tuple[RedisClusterHarness, FakeKubeAdapter, dict[str, str], str],
    tmp_path: Path,
    fault: str,
) -> None:
    h, kube, _, _ = tls_cluster_api
    if fault == "wrong password":
        kube.secrets[("default", "cache-redis-cluster")] = {"redis-password": b"not-it"}
        expected = "authentication failed while CLUSTER NODES: wrong username or password"
    elif fault == "missing secret":
        del kube.secrets[("default", "cache-redis-cluster-crt")]
        expected = "redis credentials: secret default/cache-redis-cluster-crt"
    else:
        other = write_leaf(tmp_path / "other", make_authority("other-ca"), "x")
        kube.secrets[("default", "cache-redis-cluster-crt")] = {
            **other.read(),
            "tls.crt": kube.secrets[("default", "cache-redis-cluster-crt")]["tls.crt"],
            "tls.key": kube.secrets[("default", "cache-redis-cluster-crt")]["tls.key"],
        }
        expected = (
            "TLS: the server's certificate does not verify against the CA of secret "
            "default/cache-redis-cluster-crt"
        )
    before = (h.layout(), _labels(kube))
    result = run(["--apply", "--max-moves", "1", "--redis-port", str(h.port)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert (h.layout(), _labels(kube)) == before
    assert kube.evicted == [] and kube.events == []


@pytest.mark.redis
def test_a_dry_run_without_the_secret_says_so_and_uses_the_labels(
    tls_cluster_api: tuple[RedisClusterHarness, FakeKubeAdapter, dict[str, str], str],
) -> None:
    """A person's dry run that may not read the Secrets still gets the labels' report; the
    CronJob's --apply would stop instead (above)."""
    h, kube, _, _ = tls_cluster_api
    del kube.secrets[("default", "cache-redis-cluster")]
    result = run(["--redis-port", str(h.port), "-o", "json"])
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)["roles"] == {
        "source": "labels",
        "note": "redis credentials: secret default/cache-redis-cluster (env REDIS_PASSWORD_FILE "
        "-> volume redis-password of pod default/cache-2): not found: roles from the role labels",
    }
    assert "roles from the role labels" in result.stderr


def test_the_probe_of_auto_spreads_over_zones() -> None:
    """A zone that is down must not pass for a network that reaches no pod: the pods probed
    before reading every one stand in different zones, then on different nodes."""
    from placer.redis.reading import probe_members

    nodes = [node(f"n{z}{i}", f"z{z}", f"r{z}") for z in "abc" for i in range(2)]
    pods = []
    for z in "abc":
        for i in range(2):
            for k in range(2):
                obj = redis_pod(f"a{z}{i}{k}", "c", f"{z}{i}{k}", "master", node=f"n{z}{i}")
                obj["status"] = {"phase": "Running", "podIP": f"10.0.{ord(z)}.{i * 2 + k}"}
                pods.append(obj)
    snap = snapshot(nodes, pods)
    picked = probe_members(sorted(snap.members, key=lambda m: m.key), snap)
    assert [m.pod.node_name for m in picked] == ["na0", "nb0", "nc0"]
    few = [
        m for m in sorted(snap.members, key=lambda m: m.key) if m.pod.node_name in ("na0", "na1")
    ]
    assert [m.pod.node_name for m in probe_members(few, snap)] == ["na0", "na1", "na0"]


def test_client_tls_files_are_never_seen_half_written() -> None:
    """The guard resolves access at every reading while other threads open TLS connections
    with the same files: a reader sees the old content or the new one, never a part of either,
    and content that has not changed is not written again."""
    import threading

    from placer.redis.access import _Files

    files = _Files()
    old, new = b"A" * 100_000, b"B" * 60_000
    path = Path(files.write("cluster.crt", old))
    stop = threading.Event()
    seen: set[int] = set()

    def read() -> None:
        while not stop.is_set():
            seen.add(len(path.read_bytes()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(200):
            files.write("cluster.crt", new if i % 2 else old)
    finally:
        stop.set()
        reader.join()
    assert seen <= {len(old), len(new)}, sorted(seen)
    before = path.stat().st_ino
    files.write("cluster.crt", path.read_bytes())
    assert path.stat().st_ino == before
    assert path.stat().st_mode & 0o777 == 0o600
