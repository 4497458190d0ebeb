"""Pure builders for the request bodies the adapter sends, shared by the real and the fake adapter.

Kept free of I/O so the exact shapes (what a gated pod accepts, what a Binding carries) are
tested once and the fake adapter cannot drift from the real one.
"""

import calendar
import json
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

NODE_NAME_FIELD = "metadata.name"
EVENT_MESSAGE_LIMIT = 1024
_ALREADY_ASSIGNED = re.compile(r'is already assigned to node "([^"]+)"')
_UTC_STAMP = "%Y-%m-%dT%H:%M:%SZ"


def utc_stamp(epoch: float) -> str:
    """Seconds since the epoch as Kubernetes writes a time (RFC 3339, UTC, whole seconds)."""
    return time.strftime(_UTC_STAMP, time.gmtime(epoch))


def read_utc_stamp(raw: object) -> float | None:
    """A time written by ``utc_stamp`` (an annotation's), in seconds since the epoch; None when
    missing or not one."""
    if not raw:
        return None
    try:
        return float(calendar.timegm(time.strptime(str(raw), _UTC_STAMP)))
    except ValueError:
        return None


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a pod dict, for messages and maps."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_serving(pod: Mapping[str, Any]) -> bool:
    """The pod is Ready and not being deleted: it serves its shard now."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def label_selector(labels: Mapping[str, str]) -> str:
    """``{"app": "redis"}`` as the API's ``labelSelector`` (``app=redis``)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def build_binding(
    name: str, uid: str | None, node: str, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Binding for ``pods/binding``; the uid makes the server refuse a same-named newer pod.

    The server copies the Binding's annotations onto the pod in the same write as the node, so
    what rides here (the role the plan chose, which batch decided) never lands without the bind.
    """
    metadata: dict[str, Any] = {"name": name}
    if uid:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def node_requirement(node: str) -> dict[str, Any]:
    """The field requirement that pins a pod to one node by name."""
    return {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}


def gate_names(pod: Mapping[str, Any]) -> list[str]:
    return [str(g.get("name", "")) for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def pinned_terms(pod: Mapping[str, Any], node: str) -> list[dict[str, Any]]:
    """Required node-selector terms that pin ``pod`` to ``node``, within what a gated pod allows.

    A gated pod may get a required node affinity if it had none, or new requirements added
    to its existing terms (never new terms, never changed ones): terms are ORed, so the pin
    must be ANDed into every one of them.
    """
    spec = pod.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    requirement = node_requirement(node)
    if not terms:
        return [{"matchFields": [requirement]}]
    pinned: list[dict[str, Any]] = []
    for term in terms:
        new_term = dict(term)
        fields = list(term.get("matchFields") or [])
        if requirement not in fields:
            fields.append(requirement)
        new_term["matchFields"] = fields
        pinned.append(new_term)
    return pinned


def build_pin_patch(
    pod: Mapping[str, Any],
    node: str,
    gate: str,
    resource_version: str,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A JSON merge patch that pins ``pod`` to ``node`` and removes ``gate`` in one write.

    Merge patch replaces lists whole, which is what we want: the terms and the remaining gates
    are computed from the object at ``resource_version``, and carrying that resourceVersion in
    the patch makes the server answer 409 if the pod changed meanwhile. ``labels`` (the role
    the plan gave the pod) and ``annotations`` (the binder's record of the decision) ride in
    the same write, so a pin never lands without its role.
    """
    remaining = gates_without(pod, gate)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "metadata": metadata,
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": pinned_terms(pod, node)
                    }
                }
            },
            "schedulingGates": remaining or None,
        },
    }


def gates_without(pod: Mapping[str, Any], gate: str) -> list[dict[str, Any]]:
    """The pod's scheduling gates but ``gate``, in their order: the others are not ours."""
    return [
        dict(g)
        for g in (pod.get("spec") or {}).get("schedulingGates") or []
        if g.get("name") != gate
    ]


def build_ungate_patch(pod: Mapping[str, Any], gate: str, resource_version: str) -> dict[str, Any]:
    """A JSON merge patch that removes ``gate`` alone, only from the pod at ``resource_version``
    (409 otherwise): the pod keeps every other gate and is left for kube-scheduler to place."""
    return {
        "metadata": {"resourceVersion": resource_version},
        "spec": {"schedulingGates": gates_without(pod, gate) or None},
    }


def build_eviction(namespace: str, name: str, uid: str | None = None) -> dict[str, Any]:
    """A policy/v1 Eviction; the uid precondition avoids evicting a recreated pod of the same name."""
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


def build_event(
    pod: Mapping[str, Any],
    reason: str,
    message: str,
    type_: str,
    component: str,
    instance: str,
    now: datetime | None = None,
    count: int = 1,
) -> dict[str, Any]:
    """A core/v1 Event about ``pod``, shown by ``kubectl describe pod``.

    ``count`` says how many similar events (same pod, reason and type) this one stands for,
    as kube-scheduler's event correlator folds repeats into one.

    core/v1 is used rather than events.k8s.io/v1 because the latter requires a MicroTime
    ``eventTime`` that the Python client serializes without the fixed six fraction digits
    the server insists on; core/v1 timestamps are plain RFC 3339.
    """
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name", ""))
    stamp = (now or datetime.now(UTC)).strftime(_UTC_STAMP)
    involved: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": name,
        "namespace": namespace,
    }
    if meta.get("uid"):
        involved["uid"] = meta["uid"]
    if meta.get("resourceVersion"):
        involved["resourceVersion"] = meta["resourceVersion"]
    if len(message) > EVENT_MESSAGE_LIMIT:
        message = message[: EVENT_MESSAGE_LIMIT - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": max(1, count),
    }


def status_message(body: str | bytes | None, fallback: str = "") -> str:
    """The human text of a Kubernetes ``Status`` error body, with its causes (e.g. which PDB)."""
    if not body:
        return fallback
    try:
        status = json.loads(body)
    except (ValueError, TypeError):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        return text.strip()[:500] or fallback
    if not isinstance(status, dict):
        return fallback
    parts = [str(status.get("message") or fallback)]
    details = status.get("details") or {}
    for cause in details.get("causes") or []:
        text = cause.get("message")
        if text and text not in parts[0]:
            parts.append(str(text))
    return "; ".join(p for p in parts if p)


def already_bound_node(message: str) -> str | None:
    """The node named by the server's 'already assigned' conflict, if that is the conflict."""
    match = _ALREADY_ASSIGNED.search(message)
    return match.group(1) if match else None


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what the server does with ``application/merge-patch+json``)."""
    if not isinstance(patch, dict):
        return patch
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result
