"""The real kubernetes client, through KubernetesAdapter, against a local HTTP server.

Checks the requests the adapter sends (paths, verbs, bodies) and how it reads every answer the
API server can give, without a cluster. Only 127.0.0.1 is contacted.
"""

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, Configuration
from pytest_httpserver import HTTPServer
from werkzeug import Request

from placer.kube import (
    BindOutcome,
    EvictOutcome,
    KubeAdapter,
    KubeApiError,
    KubeConfigError,
    KubernetesAdapter,
    PatchOutcome,
    WatchExpired,
    load_api_client,
)
from placer.kube.fake import FakeKubeAdapter

PIN_GATE = "redis-placer.io/placement"


@pytest.fixture(scope="session")
def httpserver_listen_address() -> tuple[str, int]:
    return ("127.0.0.1", 0)


@pytest.fixture
def api_client(httpserver: HTTPServer) -> Iterator[ApiClient]:
    configuration = Configuration(host=httpserver.url_for("").rstrip("/"), no_proxy="127.0.0.1")
    client = ApiClient(configuration)
    yield client
    client.close()


@pytest.fixture
def adapter(api_client: ApiClient) -> KubernetesAdapter:
    return KubernetesAdapter(api_client, instance="test-instance", request_timeout=5)


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure" if code >= 300 else "Success",
        "code": code,
        "reason": reason,
        "message": message,
    }
    if details:
        body["details"] = details
    return body


def body_of(request: Request) -> Any:
    return json.loads(request.get_data())


def only_request(server: HTTPServer) -> Request:
    assert len(server.log) == 1, [r.url for r, _ in server.log]
    return server.log[0][0]


def gated_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1", "resourceVersion": "41"},
        "spec": {
            "containers": [{"name": "redis", "image": "redis:7"}],
            "schedulingGates": [{"name": PIN_GATE}],
            **spec,
        },
    }


# -- bind ------------------------------------------------------------------------------------


def test_bind_posts_a_binding_to_the_pod_subresource(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request(
        "/api/v1/namespaces/ns/pods/p/binding", method="POST"
    ).respond_with_json(status(201, "", ""), status=201)
    result = adapter.bind_pod("ns", "p", "uid-1", "node-7")
    assert result.outcome is BindOutcome.BOUND and result.ok
    assert result.status == 201 and result.bound_node == "node-7"
    request = only_request(httpserver)
    assert request.headers["Content-Type"] == "application/json"
    body = body_of(request)
    assert body["kind"] == "Binding" and body["apiVersion"] == "v1"
    assert body["metadata"] == {"name": "p", "uid": "uid-1"}
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-7"}


def test_bind_carries_the_clients_token_and_refreshes_it(httpserver: HTTPServer) -> None:
    """The Binding goes through the client's own auth: a token from the kubeconfig, renewed by
    its refresh hook (as an exec or OIDC credential is) before each request."""
    tokens = iter(["first", "second"])
    configuration = Configuration(
        host=httpserver.url_for("").rstrip("/"),
        api_key={"authorization": "unset"},
        api_key_prefix={"authorization": "Bearer"},
    )
    configuration.refresh_api_key_hook = lambda c: c.api_key.update(authorization=next(tokens))  # type: ignore[assignment]
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p/binding").respond_with_json(
        status(201, "", ""), status=201
    )
    with ApiClient(configuration) as client:
        adapter = KubernetesAdapter(client, request_timeout=5)
        assert adapter.bind_pod("ns", "p", "uid-1", "n").ok
        assert adapter.bind_pod("ns", "p", "uid-1", "n").ok
    sent = [r.headers.get("Authorization") for r, _ in httpserver.log]
    assert sent == ["Bearer first", "Bearer second"]


def test_bind_without_uid_sends_no_precondition(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p/binding").respond_with_json(
        status(201, "", ""), status=201
    )
    assert adapter.bind_pod("ns", "p", None, "n").ok
    assert body_of(only_request(httpserver))["metadata"] == {"name": "p"}


def test_bind_conflict_reports_where_the_pod_already_is(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    message = 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "node-2"'
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p/binding").respond_with_json(
        status(409, "Conflict", message), status=409
    )
    result = adapter.bind_pod("ns", "p", "uid-1", "node-7")
    assert result.outcome is BindOutcome.CONFLICT and not result.ok
    assert result.status == 409
    assert result.bound_node == "node-2"
    assert "already assigned" in result.message


def test_bind_conflict_on_a_gated_pod_names_no_node(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p/binding").respond_with_json(
        status(409, "Conflict", "pod p has non-empty .spec.schedulingGates"), status=409
    )
    result = adapter.bind_pod("ns", "p", "uid-1", "node-7")
    assert result.outcome is BindOutcome.CONFLICT and result.bound_node is None


@pytest.mark.parametrize(
    ("code", "outcome"),
    [(404, BindOutcome.GONE), (500, BindOutcome.ERROR), (403, BindOutcome.ERROR)],
)
def test_bind_outcomes(
    httpserver: HTTPServer, adapter: KubernetesAdapter, code: int, outcome: BindOutcome
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p/binding").respond_with_json(
        status(code, "Whatever", f"server says {code}"), status=code
    )
    result = adapter.bind_pod("ns", "p", "uid-1", "node-7")
    assert result.outcome is outcome
    assert result.status == code
    assert result.message == f"server says {code}"


def test_bind_without_a_server_is_an_error_not_an_exception() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configuration = Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0
    result = KubernetesAdapter(ApiClient(configuration), request_timeout=2).bind_pod(
        "ns", "p", "u", "n"
    )
    assert result.outcome is BindOutcome.ERROR and result.status == 0
    assert result.message


# -- pin and ungate --------------------------------------------------------------------------


def test_pin_and_ungate_sends_one_guarded_merge_patch(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    patched = gated_pod()
    del patched["spec"]["schedulingGates"]
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p", method="PATCH").respond_with_json(
        patched
    )
    result = adapter.pin_and_ungate("ns", "p", "node-3", PIN_GATE, "41", pod=gated_pod())
    assert result.outcome is PatchOutcome.PATCHED and result.ok
    assert result.pod is not None and result.pod["kind"] == "Pod"
    request = only_request(httpserver)
    assert request.method == "PATCH"
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    body = body_of(request)
    assert body["metadata"] == {"resourceVersion": "41"}
    terms = body["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-3"]}]}
    ]
    assert body["spec"]["schedulingGates"] is None  # null removes the field: no gate left
    assert PIN_GATE not in request.get_data(as_text=True)


def test_pin_adds_the_node_to_every_existing_term_and_keeps_other_gates(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    existing = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                    {
                        "matchExpressions": [{"key": "zone", "operator": "Exists"}],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}
                        ],
                    },
                ]
            }
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    pod = gated_pod(affinity=existing)
    pod["spec"]["schedulingGates"].append({"name": "other.io/gate"})
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p", method="PATCH").respond_with_json(pod)
    assert adapter.pin_and_ungate("ns", "p", "node-3", PIN_GATE, "41", pod=pod).ok
    body = body_of(only_request(httpserver))
    pin = {"key": "metadata.name", "operator": "In", "values": ["node-3"]}
    terms = body["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 2  # a gated pod may not gain terms, only requirements in them
    assert terms[0]["matchExpressions"] == [{"key": "disk", "operator": "In", "values": ["ssd"]}]
    assert terms[0]["matchFields"] == [pin]
    assert terms[1]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["bad"]},
        pin,
    ]
    assert "podAntiAffinity" not in body["spec"]["affinity"]  # merge patch leaves it alone
    assert body["spec"]["schedulingGates"] == [{"name": "other.io/gate"}]


def test_pin_reads_the_pod_when_not_given(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_ordered_request(
        "/api/v1/namespaces/ns/pods/p", method="GET"
    ).respond_with_json(gated_pod())
    httpserver.expect_ordered_request(
        "/api/v1/namespaces/ns/pods/p", method="PATCH"
    ).respond_with_json(gated_pod())
    assert adapter.pin_and_ungate("ns", "p", "node-3", PIN_GATE, "41").ok
    assert [r.method for r, _ in httpserver.log] == ["GET", "PATCH"]


def test_pin_on_a_stale_version_conflicts_without_writing(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p", method="GET").respond_with_json(
        gated_pod()
    )
    result = adapter.pin_and_ungate("ns", "p", "node-3", PIN_GATE, "40")
    assert result.outcome is PatchOutcome.CONFLICT
    assert [r.method for r, _ in httpserver.log] == ["GET"]


def test_pin_when_the_server_sees_a_newer_version_conflicts(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p", method="PATCH").respond_with_json(
        status(409, "Conflict", "the object has been modified"), status=409
    )
    result = adapter.pin_and_ungate("ns", "p", "node-3", PIN_GATE, "41", pod=gated_pod())
    assert result.outcome is PatchOutcome.CONFLICT and result.status == 409


def test_pin_outcomes_for_gone_and_ungated_pods(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/gone", method="GET").respond_with_json(
        status(404, "NotFound", 'pods "gone" not found'), status=404
    )
    assert adapter.pin_and_ungate("ns", "gone", "n", PIN_GATE, "1").outcome is PatchOutcome.GONE
    ungated = gated_pod()
    ungated["spec"]["schedulingGates"] = []
    result = adapter.pin_and_ungate("ns", "p", "n", PIN_GATE, "41", pod=ungated)
    assert result.outcome is PatchOutcome.NOT_GATED
    assert len(httpserver.log) == 1  # no PATCH for a pod without the gate


def test_pin_rejected_by_validation_is_an_error(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p", method="PATCH").respond_with_json(
        status(422, "Invalid", "Pod is invalid: spec: Forbidden: pod updates may not change"),
        status=422,
    )
    result = adapter.pin_and_ungate("ns", "p", "n", PIN_GATE, "41", pod=gated_pod())
    assert result.outcome is PatchOutcome.ERROR and "Forbidden" in result.message


def test_patch_pod_labels_is_a_merge_patch(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p", method="PATCH").respond_with_json(
        gated_pod()
    )
    result = adapter.patch_pod_labels("ns", "p", {"redis-role": "master", "stale": None})
    assert result.ok
    request = only_request(httpserver)
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert body_of(request) == {"metadata": {"labels": {"redis-role": "master", "stale": None}}}


# -- eviction --------------------------------------------------------------------------------


def test_evict_posts_a_policy_v1_eviction(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request(
        "/api/v1/namespaces/ns/pods/p/eviction", method="POST"
    ).respond_with_json(status(201, "", ""), status=201)
    result = adapter.evict_pod("ns", "p", uid="uid-1")
    assert result.outcome is EvictOutcome.EVICTED and result.ok
    body = body_of(only_request(httpserver))
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    assert body["metadata"] == {"name": "p", "namespace": "ns"}
    assert body["deleteOptions"] == {"preconditions": {"uid": "uid-1"}}


def test_evict_blocked_by_a_pdb_carries_the_servers_reason(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p/eviction").respond_with_json(
        status(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            causes=[
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget redis-0 needs 1 healthy pods and has 1 currently",
                }
            ],
        ),
        status=429,
        headers={"Retry-After": "0"},
    )
    result = adapter.evict_pod("ns", "p")
    assert result.outcome is EvictOutcome.BLOCKED and result.status == 429
    assert "disruption budget" in result.message
    assert "redis-0 needs 1 healthy pods" in result.message
    assert len(httpserver.log) == 1  # a POST is never retried by the client


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (200, EvictOutcome.EVICTED),
        (404, EvictOutcome.GONE),
        (409, EvictOutcome.GONE),  # uid precondition: a namesake replaced the pod
        (403, EvictOutcome.ERROR),
        (500, EvictOutcome.ERROR),
    ],
)
def test_evict_outcomes(
    httpserver: HTTPServer, adapter: KubernetesAdapter, code: int, outcome: EvictOutcome
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p/eviction").respond_with_json(
        status(code, "R", "m"), status=code
    )
    assert adapter.evict_pod("ns", "p").outcome is outcome


# -- reading ---------------------------------------------------------------------------------


def test_list_nodes_and_pods_return_kubectl_shaped_dicts(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/nodes").respond_with_json(
        {
            "kind": "NodeList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "10"},
            "items": [
                {
                    "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}},
                    "spec": {"podCIDR": "10.0.0.0/24", "unschedulable": False},
                    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
                }
            ],
        }
    )
    httpserver.expect_request("/api/v1/pods").respond_with_json(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "11"},
            "items": [
                {
                    "metadata": {
                        "name": "p",
                        "namespace": "ns",
                        "creationTimestamp": "2024-01-01T00:00:00Z",
                    },
                    "spec": {
                        "nodeName": "n1",
                        "schedulerName": "redis-placer",
                        "schedulingGates": [{"name": PIN_GATE}],
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                    },
                }
            ],
        }
    )
    nodes = adapter.list_nodes()
    pods, version = adapter.list_pods_with_version()
    assert version == "11"
    assert nodes[0]["kind"] == "Node" and nodes[0]["apiVersion"] == "v1"
    assert nodes[0]["status"]["allocatable"]["memory"] == "32Gi"
    assert nodes[0]["spec"]["podCIDR"] == "10.0.0.0/24"  # camelCase, as kubectl prints
    assert pods[0]["kind"] == "Pod" and pods[0]["apiVersion"] == "v1"
    assert pods[0]["spec"]["nodeName"] == "n1"
    assert pods[0]["spec"]["schedulerName"] == "redis-placer"
    assert pods[0]["spec"]["schedulingGates"] == [{"name": PIN_GATE}]
    assert pods[0]["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"


def test_list_pages_through_continue_tokens(httpserver: HTTPServer, api_client: ApiClient) -> None:
    adapter = KubernetesAdapter(api_client, page_size=2)

    def page(request: Request) -> Any:
        from werkzeug import Response

        token = request.args.get("continue")
        assert request.args.get("limit") == "2"
        assert request.args.get("labelSelector") == "app=redis"
        names, meta = (
            (["c"], {"resourceVersion": "99"})
            if token == "t1"
            else (
                ["a", "b"],
                {"resourceVersion": "7", "continue": "t1"},
            )
        )
        items = [{"metadata": {"name": n, "namespace": "ns"}} for n in names]
        return Response(json.dumps({"kind": "PodList", "metadata": meta, "items": items}))

    httpserver.expect_request("/api/v1/namespaces/ns/pods").respond_with_handler(page)
    pods, version = adapter.list_pods_with_version("ns", label_selector="app=redis")
    assert [p["metadata"]["name"] for p in pods] == ["a", "b", "c"]
    assert version == "7"  # the first page's version: the snapshot the pages belong to
    assert len(httpserver.log) == 2


def test_list_relists_once_whole_when_the_continue_token_expired(
    httpserver: HTTPServer, api_client: ApiClient
) -> None:
    """The second list is one page (no limit), which no compaction can expire midway."""
    adapter = KubernetesAdapter(api_client, page_size=1)
    calls: list[str | None] = []
    limits: list[str | None] = []

    def page(request: Request) -> Any:
        from werkzeug import Response

        token = request.args.get("continue")
        calls.append(token)
        limits.append(request.args.get("limit"))
        if token == "old":
            return Response(json.dumps(status(410, "Expired", "too old")), status=410)
        if token is None and len(calls) == 1:
            meta = {"resourceVersion": "1", "continue": "old"}
            return Response(json.dumps({"metadata": meta, "items": [{"metadata": {"name": "a"}}]}))
        meta = {"resourceVersion": "2"}
        items = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
        return Response(json.dumps({"metadata": meta, "items": items}))

    httpserver.expect_request("/api/v1/nodes").respond_with_handler(page)
    assert [n["metadata"]["name"] for n in adapter.list_nodes()] == ["a", "b"]
    assert calls == [None, "old", None]
    assert limits == ["1", "1", None]


def test_list_failure_raises_with_status(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/pods").respond_with_json(
        status(403, "Forbidden", 'pods is forbidden: User "x" cannot list resource "pods"'),
        status=403,
    )
    with pytest.raises(KubeApiError) as caught:
        adapter.list_pods()
    assert caught.value.status == 403
    assert "cannot list" in str(caught.value)


def test_get_pod(httpserver: HTTPServer, adapter: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p").respond_with_json(
        {"metadata": {"name": "p", "resourceVersion": "5"}}
    )
    httpserver.expect_request("/api/v1/namespaces/ns/pods/q").respond_with_json(
        status(404, "NotFound", "nope"), status=404
    )
    pod = adapter.get_pod("ns", "p")
    assert pod is not None and pod["kind"] == "Pod"
    assert pod["metadata"]["resourceVersion"] == "5"
    assert adapter.get_pod("ns", "q") is None


def test_watch_pods_yields_events_and_raises_on_expiry(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
        {"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "6"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}},
    ]
    stream = "".join(json.dumps(line) + "\n" for line in lines)
    httpserver.expect_ordered_request("/api/v1/pods").respond_with_data(
        stream, content_type="application/json"
    )
    events = list(adapter.watch_pods(resource_version="4", timeout_seconds=5))
    assert [(e.type, e.resource_version) for e in events] == [
        ("ADDED", "5"),
        ("MODIFIED", "6"),
        ("BOOKMARK", "8"),
    ]
    assert events[0].object["kind"] == "Pod"
    args = httpserver.log[0][0].args
    assert args["watch"] == "true" and args["resourceVersion"] == "4"
    assert args["allowWatchBookmarks"] == "true" and args["timeoutSeconds"] == "5"

    expired = {"type": "ERROR", "object": status(410, "Expired", "too old resource version")}
    httpserver.expect_ordered_request("/api/v1/pods").respond_with_data(json.dumps(expired) + "\n")
    with pytest.raises(WatchExpired):
        list(adapter.watch_pods(resource_version="1"))


def test_a_watch_refused_with_410_itself_is_expired_too(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    """A server may answer the watch request with 410 Gone rather than an ERROR event in the
    stream: the same "list again", not a broken watch."""
    httpserver.expect_request("/api/v1/nodes").respond_with_json(
        status(410, "Expired", "too old resource version: 4 (90)"), status=410
    )
    with pytest.raises(WatchExpired) as raised:
        list(adapter.watch_nodes(resource_version="4"))
    assert raised.value.status == 410 and "too old" in raised.value.message


# -- events and configmaps -------------------------------------------------------------------


def test_record_event_describes_the_pod(httpserver: HTTPServer, adapter: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/events", method="POST").respond_with_json(
        {"metadata": {"name": "p.1"}}, status=201
    )
    pod = gated_pod()
    assert adapter.record_event(pod, "Placed", "placed on node-3 (shard 0)", "Normal")
    body = body_of(only_request(httpserver))
    assert body["kind"] == "Event" and body["apiVersion"] == "v1"
    assert body["metadata"] == {"generateName": "p.", "namespace": "ns"}
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "uid-1",
        "resourceVersion": "41",
    }
    assert body["reason"] == "Placed" and body["type"] == "Normal"
    assert body["message"] == "placed on node-3 (shard 0)"
    assert body["source"] == {"component": "redis-placer"}
    assert body["reportingComponent"] == "redis-placer"
    assert body["reportingInstance"] == "test-instance"
    assert body["firstTimestamp"].endswith(("Z", "+00:00"))


def test_record_event_failure_is_reported_not_raised(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/events").respond_with_json(
        status(403, "Forbidden", "no"), status=403
    )
    assert adapter.record_event(gated_pod(), "Waiting", "x" * 5000, "Warning") is False
    assert len(body_of(only_request(httpserver))["message"]) == 1024


def test_write_configmap_creates_then_replaces(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_ordered_request(
        "/api/v1/namespaces/rp/configmaps", method="POST"
    ).respond_with_json({"metadata": {"name": "report"}}, status=201)
    httpserver.expect_ordered_request(
        "/api/v1/namespaces/rp/configmaps", method="POST"
    ).respond_with_json(status(409, "AlreadyExists", "exists"), status=409)
    httpserver.expect_ordered_request(
        "/api/v1/namespaces/rp/configmaps/report", method="PUT"
    ).respond_with_json({"metadata": {"name": "report"}})
    data = {"plan.json": '{"status": "OPTIMAL"}'}
    assert adapter.write_configmap("rp", "report", data, labels={"app": "x"}) == "created"
    assert adapter.write_configmap("rp", "report", data) == "replaced"
    first = body_of(httpserver.log[0][0])
    assert first["kind"] == "ConfigMap" and first["data"] == data
    assert first["metadata"] == {"name": "report", "namespace": "rp", "labels": {"app": "x"}}
    assert body_of(httpserver.log[2][0])["data"] == data


def test_write_configmap_failure_raises(httpserver: HTTPServer, adapter: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/rp/configmaps").respond_with_json(
        status(403, "Forbidden", "no"), status=403
    )
    with pytest.raises(KubeApiError, match="403"):
        adapter.write_configmap("rp", "report", {})


def test_read_configmap(httpserver: HTTPServer, adapter: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/rp/configmaps/a").respond_with_json(
        {"data": {"k": "v"}}
    )
    httpserver.expect_request("/api/v1/namespaces/rp/configmaps/b").respond_with_json(
        status(404, "NotFound", "no"), status=404
    )
    assert adapter.read_configmap("rp", "a") == {"k": "v"}
    assert adapter.read_configmap("rp", "b") is None


def test_both_adapters_satisfy_the_protocol(adapter: KubernetesAdapter) -> None:
    assert isinstance(adapter, KubeAdapter)
    assert isinstance(FakeKubeAdapter(), KubeAdapter)


def test_requests_carry_the_bearer_token(httpserver: HTTPServer) -> None:
    configuration = Configuration(
        host=httpserver.url_for("").rstrip("/"),
        api_key={"authorization": "secret-token"},
        api_key_prefix={"authorization": "Bearer"},
    )
    httpserver.expect_request(
        "/api/v1/nodes", headers={"Authorization": "Bearer secret-token"}
    ).respond_with_json({"items": []})
    assert KubernetesAdapter(ApiClient(configuration)).list_nodes() == []


# -- configuration ---------------------------------------------------------------------------


def test_config_error_names_what_was_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(KubeConfigError) as caught:
        load_api_client()
    message = str(caught.value)
    assert "\n" not in message
    assert "KUBERNETES_SERVICE_HOST is not set" in message
    assert str(tmp_path / "absent") in message and "file not found" in message


def test_explicit_kubeconfig_errors_name_the_file_and_context(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(_kubeconfig("https://127.0.0.1:6443"))
    with pytest.raises(KubeConfigError) as caught:
        load_api_client(str(path), context="nope")
    assert str(path) in str(caught.value) and "'nope'" in str(caught.value)
    with pytest.raises(KubeConfigError, match="file not found"):
        load_api_client(str(tmp_path / "missing"))


def test_in_cluster_failure_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(KubeConfigError, match="in-cluster service account"):
        load_api_client()


def test_kubeconfig_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = tmp_path / "config"
    path.write_text(_kubeconfig("https://127.0.0.1:6443"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    client = load_api_client()
    assert client.configuration.host == "https://127.0.0.1:6443"
    assert client.configuration.auth_settings()["BearerToken"]["value"] == "Bearer t0ken"
    explicit = load_api_client(str(path), context="test")
    assert explicit.configuration.host == "https://127.0.0.1:6443"


def _kubeconfig(server: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t0ken"}}],
            "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "test",
        }
    )


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # the client honours *_proxy variables; these tests only talk to 127.0.0.1
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(os.environ, "NO_PROXY", "127.0.0.1,localhost")


def test_adapter_output_feeds_the_snapshot_parser(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    """The live-cluster path and the file path share one parser: the shapes must agree."""
    from models.kube_objects import build_snapshot
    from models.policy import Policy

    labels = {"app": "redis", "redis-cluster": "c", "redis-shard": "0"}
    owner = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s0", "controller": True}]
    httpserver.expect_request("/api/v1/nodes").respond_with_json(
        {
            "metadata": {"resourceVersion": "1"},
            "items": [
                {
                    "metadata": {
                        "name": f"n{i}",
                        "labels": {"topology.kubernetes.io/zone": f"z{i}", "rack": f"r{i}"},
                    },
                    "spec": {},
                    "status": {
                        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
                for i in range(2)
            ],
        }
    )
    httpserver.expect_request("/api/v1/pods").respond_with_json(
        {
            "metadata": {"resourceVersion": "2"},
            "items": [
                {
                    "metadata": {
                        "name": f"s0-{i}",
                        "namespace": "ns",
                        "uid": f"u{i}",
                        "labels": labels,
                        "ownerReferences": owner,
                    },
                    "spec": {
                        "schedulerName": "redis-placer",
                        "containers": [
                            {
                                "name": "redis",
                                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                            }
                        ],
                    },
                    "status": {"phase": "Pending"},
                }
                for i in range(2)
            ],
        }
    )
    httpserver.expect_request("/apis/apps/v1/statefulsets").respond_with_json(
        {
            "metadata": {"resourceVersion": "3"},
            "items": [{"metadata": {"name": "s0", "namespace": "ns"}, "spec": {"replicas": 2}}],
        }
    )
    sets = adapter.list_statefulsets()
    assert sets[0]["kind"] == "StatefulSet" and sets[0]["apiVersion"] == "apps/v1"
    objects = [*adapter.list_nodes(), *adapter.list_pods(), *sets]
    snapshot = build_snapshot(objects, Policy())
    assert [n.name for n in snapshot.nodes] == ["n0", "n1"]
    assert all(n.ready for n in snapshot.nodes)
    assert len(snapshot.pending) == 2
    assert {m.shard_size for m in snapshot.members} == {2}  # from the StatefulSet's replicas
    assert not [i for i in snapshot.issues if i.severity != "warning"]


def test_audit_of_a_live_cluster_that_refuses_the_list_is_one_clear_line(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    """RBAC missing (403): the user reads which request failed and why, not a traceback."""
    from click.testing import CliRunner

    from placer.cli import main

    httpserver.expect_request("/api/v1/nodes").respond_with_json(
        {"kind": "Status", "code": 403, "message": 'nodes is forbidden: User "x" cannot list'},
        status=403,
    )
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": httpserver.url_for("/")}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    result = CliRunner().invoke(main, ["audit", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2, result.output
    assert "cannot read the cluster: list nodes: HTTP 403" in result.output
    assert "forbidden" in result.output and "Traceback" not in result.output


def test_every_answer_is_read_so_its_connection_serves_the_next_request(
    httpserver: HTTPServer, api_client: ApiClient, adapter: KubernetesAdapter
) -> None:
    """A response left unread takes its connection away: each call would open (and TLS-shake
    hands on) a new one. Binds, events, evictions and ConfigMap writes all read theirs."""
    httpserver.expect_request(
        "/api/v1/namespaces/ns/pods/p/binding", method="POST"
    ).respond_with_json(status(201, "", "bound"), status=201)
    httpserver.expect_request("/api/v1/namespaces/ns/events", method="POST").respond_with_json(
        {"kind": "Event"}, status=201
    )
    httpserver.expect_request(
        "/api/v1/namespaces/ns/pods/p/eviction", method="POST"
    ).respond_with_json(status(201, "", "evicted"), status=201)
    httpserver.expect_request("/api/v1/namespaces/ns/configmaps", method="POST").respond_with_json(
        {"kind": "ConfigMap"}, status=201
    )
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    for _ in range(10):
        assert adapter.bind_pod("ns", "p", "u", "n1").ok
        assert adapter.record_event(pod, "Scheduled", "placed")
        assert adapter.evict_pod("ns", "p").ok
        assert adapter.write_configmap("ns", "report", {"k": "v"}) == "created"
    pool = api_client.rest_client.pool_manager.connection_from_url(httpserver.url_for("/"))
    assert pool.num_requests == 40
    assert pool.num_connections == 1
