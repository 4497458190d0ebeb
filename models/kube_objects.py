"""Build a Snapshot from Kubernetes objects as ``kubectl get -o yaml|json`` prints them.

Pure: it takes already-decoded documents. Every rejected object becomes an Issue naming it;
nothing is silently merged or dropped.
"""

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard, cast

import yaml
from pydantic import ValidationError

from models.cluster import (
    Member,
    Node,
    Pod,
    Role,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from models.errors import InputError
from models.identity.common import ROLE_ANNOTATION as ROLE_ANNOTATION
from models.identity.common import SHARD_SIZE_ANNOTATION as SHARD_SIZE_ANNOTATION
from models.identity.facts import StatefulSetFacts, statefulset_facts
from models.identity.read import IdentityMemo, identify
from models.identity.result import Unidentified
from models.policy import Policy
from models.quantity import QuantityError, cpu_millis, memory_bytes, non_negative, whole_count
from models.resources import Resources
from models.snapshot import Issue, Snapshot
from models.volumes import KINDS as VOLUME_KINDS
from models.volumes import VolumeObjects, claim_names

BATCH_ANNOTATION = "redis-placer.io/batch"
"""Which of the binder's solves placed the pod (the ``batch=`` of its log lines)."""
SINGLE_ZONE = "(one zone)"
"""The zone of every node when the policy names no zone label (``topology.zone: ""``). Label
values cannot hold spaces or parentheses, so it never meets a real zone."""
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
try:
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader


def parse_documents(text: str, source: str = "input") -> list[dict[str, Any]]:
    """Decode JSON or (multi-document) YAML into a flat list of objects, unwrapping ``List`` kinds."""
    stripped = text.lstrip()
    docs: list[Any]
    try:
        if stripped.startswith("{") or stripped.startswith("["):
            docs = [json.loads(text)]  # orjson gains little on a whole dump (allocation)
        elif _nested_too_deeply(text):
            raise RecursionError
        else:
            docs = list(yaml.load_all(text, Loader=_Loader))
        return flatten(docs, source)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        detail = str(exc).replace("\n", " ")
        raise InputError(f"not valid YAML or JSON: {detail}", obj=source) from None
    except RecursionError:
        raise InputError("nested too deeply to be a Kubernetes object dump", obj=source) from None


MAX_DEPTH = 500
"""Nesting that a dump may reach. Kubernetes objects nest a few dozen levels; libyaml's loader
recurses in C and crashes the process on a document nested tens of thousands deep, so such a
document is refused before it is loaded (JSON's decoder stops at Python's recursion limit)."""
_FLOW = re.compile(r"[\[\]{}]")
_DEEP_LINE = re.compile(r"^[ \t?:-]{120}", re.MULTILINE)
_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _nested_too_deeply(text: str) -> bool:
    """Whether the YAML nests deeper than ``MAX_DEPTH``, read from parser events (no recursion).

    Depth is at most the open flow brackets plus twice a line's indentation and indicators, so
    text whose bound stays low (every real dump) skips the event pass.
    """
    if not _maybe_deep(text):
        return False
    try:
        return _deeper_than_max(text, _Loader)
    except yaml.YAMLError:
        # Some libyaml builds refuse deep flow nesting themselves, in words of their own, before
        # the events reach our limit. Brackets open past the limit say it at once; otherwise
        # the pure-Python parser streams every event and settles it.
        if _flow_depth(text) > MAX_DEPTH:
            return True
        try:
            return _deeper_than_max(text, yaml.SafeLoader)
        except yaml.YAMLError:
            return False  # not YAML at all: loading it reports why


def _deeper_than_max(text: str, loader: Any) -> bool:
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif isinstance(event, _CLOSE):
            depth -= 1
    return False


def _maybe_deep(text: str) -> bool:
    return bool(_DEEP_LINE.search(text)) or _flow_depth(text) > MAX_DEPTH // 2


def _flow_depth(text: str) -> int:
    """The most flow brackets open at once, quotes not told apart: at least the flow depth."""
    balance = deepest = 0
    for bracket in _FLOW.finditer(text):
        if bracket.group() in "[{":
            balance += 1
            deepest = max(deepest, balance)
        elif balance:
            balance -= 1
    return deepest


def flatten(
    docs: Iterable[Any], source: str = "input", _seen: set[int] | None = None
) -> list[dict[str, Any]]:
    """The objects of decoded documents, ``List`` kinds unwrapped.

    A list reached twice is refused: only a YAML alias makes one, and a dump lists each object
    once. Followed, a few nested aliases would list the same objects billions of times (a
    700-byte file took gigabytes and minutes before "appears twice" could be said)."""
    seen = set() if _seen is None else _seen
    objects: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if isinstance(doc, list):
            _once(doc, seen, source)
            objects.extend(flatten(doc, source, seen))
            continue
        if not isinstance(doc, dict):
            raise InputError(
                f"document {index} is a {type(doc).__name__}, not a Kubernetes object", obj=source
            )
        if str(doc.get("kind", "")).endswith("List") or ("items" in doc and "kind" not in doc):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise InputError("items is not a list", obj=source, field=f"document {index}")
            _once(items, seen, source)
            objects.extend(flatten(items, source, seen))
        else:
            objects.append(doc)
    return objects


def _once(items: list[Any], seen: set[int], source: str) -> None:
    if id(items) in seen:
        raise InputError(
            "lists the same items twice (a YAML alias): a dump lists each object once",
            obj=source,
        )
    seen.add(id(items))


def _is_mapping(raw: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(raw, Mapping)``, with decoded JSON's own type first: the abstract class's
    check costs a few microseconds, and a large dump asks it about half a million times."""
    return type(raw) is dict or isinstance(raw, Mapping)


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    meta = meta if _is_mapping(meta) else {}
    kind = obj.get("kind")
    kind = kind if isinstance(kind, str) and kind else "object"
    name = meta.get("name", "<unnamed>")
    ns = meta.get("namespace")
    return f"{kind.lower()} {ns}/{name}" if ns else f"{kind.lower()} {name}"


_AMOUNTS = {"cpu": cpu_millis, "memory": memory_bytes, "pods": whole_count}
"""The resources the rules count, each in the unit it is counted in."""


def _amounts(raw: object, where: str, field: str) -> dict[str, int]:
    """The counted resources present in ``raw``; every quantity there is held to Kubernetes' rules.

    Kubernetes rejects a malformed or negative quantity in requests, limits, overhead and a
    node's allocatable alike, so a dump holding one was not read from a cluster: it is an error
    naming the exact field, never a value guessed at.
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputError(
            "must be a mapping of resource names to quantities", obj=where, field=field
        )
    key = tuple(raw.items())
    try:
        known = _AMOUNTS_SEEN.get(key)
    except TypeError:  # a value that is no quantity at all: judged below, where it is named
        key, known = (), None
    if known is not None:
        return dict(known)
    amounts: dict[str, int] = {}
    for name, value in raw.items():
        at = f"{field}.{name}"
        try:
            non_negative(value)
            convert = _AMOUNTS.get(str(name))
            if convert is not None:
                amounts[str(name)] = convert(value)
        except QuantityError as exc:
            raise InputError(str(exc), obj=where, field=at) from None
    if key and len(_AMOUNTS_SEEN) < _REQUESTS_LIMIT:
        _AMOUNTS_SEEN[key] = dict(amounts)
    return amounts


_AMOUNTS_SEEN: dict[tuple[Any, ...], dict[str, int]] = {}
"""Amounts that read without error, by their raw items: the nodes of a pool and the containers
of a StatefulSet repeat the same few."""


def _resources(raw: object, where: str, field: str) -> Resources:
    return Resources(**_amounts(raw, where, field))


def _container_requests(container: Mapping[str, Any], where: str, field: str) -> Resources:
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        raise InputError("must be a mapping (limits, requests)", obj=where, field=field)
    limits = _amounts(res.get("limits"), where, f"{field}.limits")
    requests = _amounts(res.get("requests"), where, f"{field}.requests")
    effective = {**limits, **requests}  # Kubernetes defaults requests to limits
    effective.pop("pods", None)
    return Resources(**effective)


_REQUESTS: dict[str, Resources] = {}
"""Effective requests by the parts of a pod spec they come from: the pods of one StatefulSet
repeat the same few, and a large dump has tens of thousands of pods."""
_REQUESTS_LIMIT = 4096


def pod_requests(spec: Mapping[str, Any], where: str) -> Resources:
    """Effective requests: sum of containers and sidecars, at least each init container, plus
    overhead. Remembered per distinct spec once it parsed without error: the key is the text
    of the parts it reads: ``repr`` of decoded JSON is one text per value, and cheaper to
    make than a hashable copy."""
    key = repr(
        (
            _request_parts(spec.get("containers")),
            _request_parts(spec.get("initContainers")),
            spec.get("overhead"),
        )
    )
    known = _REQUESTS.get(key)
    if known is not None:
        return known
    result = _pod_requests(spec, where)
    if len(_REQUESTS) < _REQUESTS_LIMIT:
        _REQUESTS[key] = result
    return result


def _request_parts(containers: object) -> object:
    """What ``_pod_requests`` reads of a list of containers: each one's resources and restart
    policy. Anything else is kept whole (the parse then says what is wrong with it)."""
    if isinstance(containers, list) and all(_is_mapping(c) for c in containers):
        return [(c.get("resources"), c.get("restartPolicy")) for c in containers]
    return containers


def _pod_requests(spec: Mapping[str, Any], where: str) -> Resources:
    total = Resources()
    for i, c in enumerate(_mappings(spec.get("containers"), where, "spec.containers")):
        total = total + _container_requests(c, where, f"spec.containers[{i}].resources")
    sidecars = Resources()
    peak_init = Resources()
    for i, c in enumerate(_mappings(spec.get("initContainers"), where, "spec.initContainers")):
        req = _container_requests(c, where, f"spec.initContainers[{i}].resources")
        if c.get("restartPolicy") == "Always":
            sidecars = sidecars + req
        else:
            during = req + sidecars
            peak_init = Resources(
                cpu=max(peak_init.cpu, during.cpu), memory=max(peak_init.memory, during.memory)
            )
    total = total + sidecars
    total = Resources(cpu=max(total.cpu, peak_init.cpu), memory=max(total.memory, peak_init.memory))
    overhead = _resources(spec.get("overhead"), where, "spec.overhead")
    return Resources(cpu=total.cpu + overhead.cpu, memory=total.memory + overhead.memory, pods=1)


def _requirements(raw: Any, where: str, field: str) -> tuple[SelectorRequirement, ...]:
    out = []
    for i, r in enumerate(raw or []):
        if not isinstance(r, Mapping) or "key" not in r or "operator" not in r:
            raise InputError("needs key and operator", obj=where, field=f"{field}[{i}]")
        op = str(r["operator"])
        if op not in {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}:
            raise InputError(f"unknown operator {op!r}", obj=where, field=f"{field}[{i}]")
        values = tuple(str(v) for v in (r.get("values") or []))
        if op in {"Gt", "Lt"} and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
            raise InputError(
                f"{op} needs exactly one integer value", obj=where, field=f"{field}[{i}]"
            )
        out.append(SelectorRequirement(key=str(r["key"]), operator=op, values=values))
    return tuple(out)


def _affinity_terms(spec: Mapping[str, Any], where: str) -> tuple[SelectorTerm, ...]:
    affinity = _mapping(spec.get("affinity"), where, "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), where, "spec.affinity.nodeAffinity")
    required_at = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where, required_at
    )
    terms = []
    base = f"{required_at}.nodeSelectorTerms"
    for i, t in enumerate(_mappings(required.get("nodeSelectorTerms"), where, base)):
        terms.append(
            SelectorTerm(
                match_expressions=_requirements(
                    t.get("matchExpressions"), where, f"{base}[{i}].matchExpressions"
                ),
                match_fields=_requirements(t.get("matchFields"), where, f"{base}[{i}].matchFields"),
            )
        )
    return tuple(terms)


def _mapping(raw: object, where: str, field: str) -> Mapping[str, Any]:
    """A part of an object that must be a mapping; absent or null reads as empty."""
    if raw is None:
        return {}
    if not _is_mapping(raw):
        raise InputError(f"must be a mapping, not {_shape(raw)}", obj=where, field=field)
    return raw


def _mappings(raw: object, where: str, field: str) -> list[Mapping[str, Any]]:
    """A part that must be a list of mappings (containers, tolerations, taints, ...)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InputError(f"must be a list, not {_shape(raw)}", obj=where, field=field)
    for i, item in enumerate(raw):
        if not _is_mapping(item):
            raise InputError(
                f"must be a mapping, not {_shape(item)}", obj=where, field=f"{field}[{i}]"
            )
    return raw


def _text(raw: object, where: str, field: str) -> str | None:
    """A field Kubernetes holds as a string; null reads as absent."""
    if raw is None or isinstance(raw, str):
        return raw
    raise InputError(f"must be a string, not {_shape(raw)}", obj=where, field=field)


def _strings(raw: object, where: str, field: str) -> dict[str, str]:
    """Labels, annotations, a node selector: strings to strings, as Kubernetes stores them.

    A value of another type was not read from a cluster; read as text it would make a label
    like ``{'k': 'v'}`` a zone of its own, so it is refused where it is."""
    out: dict[str, str] = {}
    for key, value in _mapping(raw, where, field).items():
        if not isinstance(value, str):
            hint = " (quote it)" if isinstance(value, int | float) else ""
            raise InputError(
                f"must be a string, not {_shape(value)}{hint}", obj=where, field=f"{field}.{key}"
            )
        out[str(key)] = value
    return out


def _shape(raw: object) -> str:
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return f"the boolean {str(raw).lower()}"
    if isinstance(raw, int | float):
        return f"the number {raw!r}"
    if isinstance(raw, str):
        return f"the string {raw!r}"
    if isinstance(raw, Mapping):
        return "a mapping"
    return "a list" if isinstance(raw, list) else type(raw).__name__


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    where = _name_of(obj)
    meta = _mapping(obj.get("metadata"), where, "metadata")
    if obj.get("spec") is None:
        raise InputError("is missing: every pod has one", obj=where, field="spec")
    spec = _mapping(obj.get("spec"), where, "spec")
    status = _mapping(obj.get("status"), where, "status")
    if not meta.get("name"):
        raise InputError("metadata.name is missing", obj=where)
    name = str(_text(meta["name"], where, "metadata.name"))
    _mappings(spec.get("volumes"), where, "spec.volumes")  # claim_names reads each one
    owners = _mappings(meta.get("ownerReferences"), where, "metadata.ownerReferences")
    owner = next((o for o in owners if o.get("controller")), None)
    owner = owner or next(iter(owners), None)
    return Pod(
        namespace=_text(meta.get("namespace"), where, "metadata.namespace") or "default",
        name=name,
        uid=_text(meta.get("uid"), where, "metadata.uid") or "",
        labels=_strings(meta.get("labels"), where, "metadata.labels"),
        annotations=_strings(meta.get("annotations"), where, "metadata.annotations"),
        node_name=_text(spec.get("nodeName"), where, "spec.nodeName") or None,
        phase=_text(status.get("phase"), where, "status.phase") or "Pending",
        requests=pod_requests(spec, where),
        tolerations=tuple(
            Toleration(
                key=t.get("key"),
                operator=t.get("operator") or "Equal",
                value=t.get("value"),
                effect=t.get("effect"),
            )
            for t in _mappings(spec.get("tolerations"), where, "spec.tolerations")
        ),
        node_selector=_strings(spec.get("nodeSelector"), where, "spec.nodeSelector"),
        affinity_terms=_affinity_terms(spec, where),
        scheduler_name=_text(spec.get("schedulerName"), where, "spec.schedulerName")
        or "default-scheduler",
        scheduling_gates=tuple(
            str(g.get("name"))
            for g in _mappings(spec.get("schedulingGates"), where, "spec.schedulingGates")
        ),
        owner_kind=owner.get("kind") if owner else None,
        owner_name=owner.get("name") if owner else None,
        pod_ip=_text(status.get("podIP"), where, "status.podIP"),
        resource_version=str(meta.get("resourceVersion") or ""),
        deleting=bool(_text(meta.get("deletionTimestamp"), where, "metadata.deletionTimestamp")),
        claims=claim_names(spec, name),
    )


_META_PARSED = ("name", "namespace", "uid", "labels", "ownerReferences", "deletionTimestamp")
"""What ``parse_pod`` reads of a pod's metadata, annotations and resourceVersion aside."""


def placed_again(earlier: tuple[Mapping[str, Any], Pod], obj: Mapping[str, Any]) -> Pod | None:
    """``obj`` parsed from an earlier parse of the same pod, when the two differ only in what
    changes as a pod is bound and labelled: its node, its annotations, its resourceVersion and
    its status. None when anything else differs (then it is parsed afresh).

    The binder sees each pod three times or more on its way to running (pending, assumed on
    its node, bound); parsing its requests, tolerations and affinity again each time was a
    third of its reading.
    """
    before, pod = earlier
    meta, old_meta = obj.get("metadata") or {}, before.get("metadata") or {}
    if any(meta.get(k) != old_meta.get(k) for k in _META_PARSED):
        return None
    spec, old_spec = obj.get("spec") or {}, before.get("spec") or {}
    if any(
        spec.get(k) != old_spec.get(k) for k in spec.keys() | old_spec.keys() if k != "nodeName"
    ):
        return None
    annotations = meta.get("annotations") or {}
    status = obj.get("status") or {}
    node, ip = spec.get("nodeName"), status.get("podIP")
    if not isinstance(annotations, Mapping) or not all(
        isinstance(v, str | None) for v in (node, ip, status.get("phase"))
    ):
        return None  # a shape a fresh parse must judge
    return pod.model_copy(
        update={
            "annotations": {str(k): str(v) for k, v in annotations.items()},
            "node_name": node or None,
            "phase": str(status.get("phase") or "Pending"),
            "pod_ip": ip,
            "resource_version": str(meta.get("resourceVersion") or ""),
        }
    )


def _parsed(parse: Any, obj: Mapping[str, Any], *args: Any) -> Any:
    """Run a parser, turning any shape error deep inside the object into an error naming it."""
    try:
        return parse(obj, *args)
    except InputError:
        raise
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(
            first["msg"], obj=_name_of(obj), field=".".join(str(p) for p in first["loc"])
        ) from None
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise InputError(f"malformed object ({exc})", obj=_name_of(obj)) from None
    except RecursionError:
        raise InputError("nested too deeply to be a Kubernetes object", obj=_name_of(obj)) from None


def _ready(conditions: list[Mapping[str, Any]]) -> bool:
    for cond in conditions:
        if cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return False


def parse_node(obj: Mapping[str, Any], policy: Policy, issues: list[Issue]) -> Node:
    where = _name_of(obj)
    meta = _mapping(obj.get("metadata"), where, "metadata")
    spec = _mapping(obj.get("spec"), where, "spec")
    status = _mapping(obj.get("status"), where, "status")
    if not meta.get("name"):
        raise InputError("metadata.name is missing", obj=where)
    name = str(_text(meta["name"], where, "metadata.name"))
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        raise InputError(
            f"must be true or false, not {_shape(unschedulable)}",
            obj=where,
            field="spec.unschedulable",
        )
    labels = _strings(meta.get("labels"), where, "metadata.labels")
    raw_alloc = status.get("allocatable") or status.get("capacity")
    if not raw_alloc:
        issues.append(
            Issue(
                object=where,
                message="status.allocatable is missing: the node takes no new pod",
                severity="warning",
            )
        )
    field = "status.allocatable" if status.get("allocatable") else "status.capacity"
    allocatable = _resources(raw_alloc, where, field)
    if raw_alloc and "pods" not in raw_alloc:
        allocatable = Resources(cpu=allocatable.cpu, memory=allocatable.memory, pods=110)
    topo = policy.topology
    zone = labels.get(topo.zone) or None if topo.zone else SINGLE_ZONE
    rack = labels.get(topo.rack) or None if topo.rack else None
    if rack is None:
        rack = f"{zone if zone is not None else '?'}/*"
    host = (labels.get(topo.host) if topo.host else None) or name
    return Node(
        name=name,
        labels=labels,
        allocatable=allocatable,
        taints=tuple(
            Taint(key=str(t.get("key")), value=t.get("value"), effect=str(t.get("effect")))
            for t in _mappings(spec.get("taints"), where, "spec.taints")
        ),
        ready=_ready(_mappings(status.get("conditions"), where, "status.conditions")),
        unschedulable=bool(spec.get("unschedulable")),
        zone=zone,
        rack=rack,
        host=host,
        kubelet_version=_kubelet_version(status),
    )


def _kubelet_version(status: Mapping[str, Any]) -> str:
    info = status.get("nodeInfo")
    version = info.get("kubeletVersion") if isinstance(info, Mapping) else None
    return version if isinstance(version, str) else ""


class ParseCache:
    """Parsed nodes and pods by (uid or name, resourceVersion), for callers that rebuild often.

    The binder rebuilds its snapshot for every batch from objects that mostly did not change;
    parsing 15,000 pods costs seconds, looking them up milliseconds. Objects without a
    resourceVersion (files) are parsed every time. Valid for one policy only.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Mapping[str, Any], Pod]] = {}
        """By object identity, holding the object so its id cannot be reused: the binder
        hands in the very same dicts batch after batch, and this skips even the key."""
        self.pods: dict[tuple[str, str], Pod] = {}
        self.nodes: dict[tuple[str, str], tuple[Node, tuple[Issue, ...]]] = {}
        self.members: dict[tuple[str, str, str, str, Role | None, int | None, bool], Member] = {}
        self.identities = IdentityMemo()
        self._latest: dict[str, tuple[Mapping[str, Any], Pod]] = {}
        """The newest parse of each pod (by uid): a binding or an annotation changes a pod
        without changing what most of its parse reads, so that parse is reused."""

    @staticmethod
    def key(obj: Mapping[str, Any]) -> tuple[str, str] | None:
        """(uid or name, resourceVersion), plus the node for a pod: a caller may count a pod on
        a node the server has not recorded yet (an assumed binding, a pin) without a new version.
        """
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not version:
            return None
        node = (obj.get("spec") or {}).get("nodeName")
        name = str(meta.get("uid") or meta.get("name"))
        return (name, f"{version}@{node}" if node else str(version))

    def pod(self, obj: Mapping[str, Any]) -> Pod:
        seen = self._seen.get(id(obj))
        if seen is not None and seen[0] is obj:
            return seen[1]
        pod = self._pod(obj)
        if obj.get("metadata", {}).get("resourceVersion"):
            self._seen[id(obj)] = (obj, pod)
        return pod

    def _pod(self, obj: Mapping[str, Any]) -> Pod:
        key = self.key(obj)
        if key is None:
            return cast(Pod, _parsed(parse_pod, obj))
        pod = self.pods.get(key)
        if pod is None:
            earlier = self._latest.get(key[0])
            pod = placed_again(earlier, obj) if earlier is not None else None
            if pod is None:
                pod = _parsed(parse_pod, obj)
            self.pods[key] = pod
            self._latest[key[0]] = (obj, pod)
        return pod

    def node(self, obj: Mapping[str, Any], policy: Policy, issues: list[Issue]) -> Node:
        key = self.key(obj)
        if key is None:
            return cast(Node, _parsed(parse_node, obj, policy, issues))
        cached = self.nodes.get(key)
        if cached is None:
            own: list[Issue] = []
            cached = self.nodes[key] = (_parsed(parse_node, obj, policy, own), tuple(own))
        issues.extend(cached[1])
        return cached[0]

    def member(
        self,
        pod: Pod,
        cluster: str,
        shard: str,
        role: Role | None,
        size: int | None,
        ordered: bool = False,
    ) -> Member:
        if not pod.resource_version or pod.volumes:  # volumes change without the pod
            return Member(
                pod=pod, cluster=cluster, shard=shard, role=role, shard_size=size, ordered=ordered
            )
        version = (
            f"{pod.resource_version}@{pod.node_name}" if pod.node_name else pod.resource_version
        )
        key = (pod.uid or pod.name, version, cluster, shard, role, size, ordered)
        member = self.members.get(key)
        if member is None:
            member = self.members[key] = Member(
                pod=pod, cluster=cluster, shard=shard, role=role, shard_size=size, ordered=ordered
            )
        return member

    @property
    def size(self) -> int:
        return max(len(self.pods), len(self._seen), len(self.members))

    def forget_except(self, live: set[tuple[str, str]]) -> None:
        """Drop entries of objects that changed or went away, so the cache stays bounded."""
        self.pods = {k: v for k, v in self.pods.items() if k in live}
        names = {name for name, _ in live}
        self._latest = {k: v for k, v in self._latest.items() if k in names}
        self._seen = {i: seen for i, seen in self._seen.items() if self.key(seen[0]) in live}
        self.nodes = {k: v for k, v in self.nodes.items() if k in live}
        self.members = {k: v for k, v in self.members.items() if k[:2] in live}


def finished_issue(pod: Pod) -> Issue:
    """A Redis pod that has finished is no member: said, since its shard is judged without it."""
    return Issue(
        object=f"pod {pod.key}",
        message=f"has finished ({pod.phase}): not a member until it runs again",
        severity="warning",
    )


_KINDS_READ = {k.lower(): k for k in ("Node", "Pod", "StatefulSet", *VOLUME_KINDS)}
"""The kinds a snapshot reads, by their lower case: ``kind: pod`` is a typo, not another kind
to pass over (its pod would vanish from the judgement without a word)."""


def build_snapshot(
    objects: Iterable[Mapping[str, Any]],
    policy: Policy,
    cache: ParseCache | None = None,
    *,
    namespace: str | None = None,
) -> Snapshot:
    """Turn decoded Kubernetes objects into a Snapshot, recording every rejected object as an Issue.

    With ``namespace``, only the selected pods of that namespace are Redis pods; the running
    pods of other namespaces, selected or not, are load on their nodes, as any other pod."""
    issues: list[Issue] = []
    nodes: dict[str, Node] = {}
    pods: dict[str, Pod] = {}
    statefulsets: dict[tuple[str, str], StatefulSetFacts] = {}
    volumes = VolumeObjects()
    for position, obj in enumerate(objects, 1):
        kind = obj.get("kind")
        if not kind or not isinstance(kind, str):
            meta = obj.get("metadata")
            named = _name_of(obj) if isinstance(meta, Mapping) and meta.get("name") else ""
            problem = "is missing" if not kind else f"must be a string, not {_shape(kind)}"
            raise InputError(
                f"{problem}: every object in a dump names its kind (Node, Pod, ...)",
                obj=named or f"object #{position}",
                field="kind",
            )
        if kind.lower() in _KINDS_READ and kind not in _KINDS_READ.values():
            raise InputError(
                f"{kind!r} is not a kind: kinds are spelled {_KINDS_READ[kind.lower()]!r}",
                obj=f"object #{position}",
                field="kind",
            )
        if kind == "Node":
            node = (
                cache.node(obj, policy, issues)
                if cache
                else _parsed(parse_node, obj, policy, issues)
            )
            if node.name in nodes:
                raise InputError("appears twice", obj=f"node {node.name}")
            nodes[node.name] = node
        elif kind == "Pod":
            pod = cache.pod(obj) if cache else _parsed(parse_pod, obj)
            if pod.key in pods:
                raise InputError("appears twice", obj=f"pod {pod.key}")
            pods[pod.key] = pod
        elif kind == "StatefulSet":
            facts = statefulset_facts(obj)
            statefulsets[(facts.namespace, facts.name)] = facts
        elif kind in VOLUME_KINDS:
            volumes.add(obj)

    volumes.attach(pods, issues)
    report_missing_domains(nodes, policy, issues)
    members: list[Member] = []
    size_source: dict[str, str] = {}
    others: list[Pod] = []
    selected: list[Pod] = []
    said: list[Pod] = []
    """The selected pods in order, finished ones too: each is said something of."""
    for pod in pods.values():
        if policy.selects(pod.labels) and namespace in (None, pod.namespace):
            said.append(pod)
            if pod.phase not in TERMINAL_PHASES:
                selected.append(pod)
        elif not pod.pending and pod.phase not in TERMINAL_PHASES:
            others.append(pod)
    identities = identify(
        selected, statefulsets, policy, issues, cache.identities if cache else None
    )
    for pod in said:
        if pod.phase in TERMINAL_PHASES:
            issues.append(finished_issue(pod))
            continue
        found = identities[pod.key]
        if isinstance(found, Unidentified):
            issues.append(Issue(object=f"pod {pod.key}", message=found.message))
            if not pod.pending:
                others.append(pod)
            continue
        if found.role is None and not pod.pending:
            issues.append(
                Issue(
                    object=f"pod {pod.key}",
                    message=f"running pod has no {policy.labels.role!r} label: its shard is skipped",
                )
            )
        if found.size_source:
            size_source[pod.key] = found.size_source
        cluster_key = f"{pod.namespace}/{found.cluster}"
        members.append(
            cache.member(pod, cluster_key, found.shard, found.role, found.size, found.ordered)
            if cache
            else Member(
                pod=pod,
                cluster=cluster_key,
                shard=found.shard,
                role=found.role,
                shard_size=found.size,
                ordered=found.ordered,
            )
        )
        if pod.node_name is not None and pod.node_name not in nodes:
            issues.append(
                Issue(
                    object=f"pod {pod.key}",
                    message=f"bound to node {pod.node_name!r}, which is not in the snapshot: counted as lost",
                    severity="warning",
                )
            )

    members, skipped = valid_shards(members, issues)
    report_shard_sizes(members, size_source, issues)
    others.extend(m.pod for m in skipped if not m.pod.pending)
    return Snapshot(
        nodes=tuple(sorted(nodes.values(), key=lambda n: n.name)),
        members=tuple(sorted(members, key=lambda m: m.key)),
        other_pods=tuple(sorted(others, key=lambda p: p.key)),
        issues=tuple(issues),
        skipped_members=tuple(sorted(skipped, key=lambda m: m.key)),
        free_volumes=volumes.free_volumes(),
    )


def report_shard_sizes(
    members: list[Member], size_source: Mapping[str, str], issues: list[Issue]
) -> None:
    """A shard whose members disagree on its size is an error; one short of (or beyond) the size
    it expects is odd but usable, and said as a warning."""
    by_shard: dict[str, list[Member]] = {}
    for m in members:
        if not m.pod.deleting:
            by_shard.setdefault(m.shard_key, []).append(m)
    for shard_key, group in sorted(by_shard.items()):
        sized = {m.shard_size: m for m in group if m.shard_size is not None}
        if not sized:
            continue
        if len(sized) > 1:
            said = ", ".join(
                f"{size} ({size_source.get(m.key, 'size')} of pod {m.key})"
                for size, m in sorted(sized.items())
            )
            issues.append(
                Issue(object=f"shard {shard_key}", message=f"members disagree on its size: {said}")
            )
            continue
        size, first = next(iter(sized.items()))
        source = size_source.get(first.key, "its size")
        present = len(group)
        if present < size:
            issues.append(
                Issue(
                    object=f"shard {shard_key}",
                    message=f"{present} of {size} members present ({source} says {size}): "
                    "the shard is running short",
                    severity="warning",
                )
            )
        elif present > size:
            issues.append(
                Issue(
                    object=f"shard {shard_key}",
                    message=f"{present} members present, more than the {size} that {source} says",
                    severity="warning",
                )
            )


def valid_shards(members: list[Member], issues: list[Issue]) -> tuple[list[Member], list[Member]]:
    """Drop shards whose roles contradict themselves; their running pods stay as plain load."""
    by_shard: dict[str, list[Member]] = {}
    for m in members:
        by_shard.setdefault(m.shard_key, []).append(m)
    kept: list[Member] = []
    skipped: list[Member] = []
    for shard_key, group in sorted(by_shard.items()):
        masters = sorted(m.key for m in group if m.role is Role.MASTER and not m.pod.deleting)
        unlabelled_running = [m for m in group if m.role is None and not m.pod.pending]
        if len(masters) > 1:
            issues.append(
                Issue(
                    object=f"shard {shard_key}",
                    message=f"has {len(masters)} masters ({', '.join(masters)}): shard skipped",
                )
            )
            skipped.extend(group)
        elif unlabelled_running:
            skipped.extend(group)
        else:
            kept.extend(group)
    return kept, skipped


def report_missing_domains(nodes: dict[str, Node], policy: Policy, issues: list[Issue]) -> None:
    """A node missing a topology label (or holding an empty one) is reported, never merged into
    another domain silently.

    A node without a zone label takes no new managed pod; when no node has one, nothing can be
    placed at all, which is an error that names the label. A node without a rack label counts
    as sharing a rack with its whole zone, the cautious reading (a rack lies inside its zone);
    a cluster with no rack labels at all says so once.
    """
    topo = policy.topology
    if not nodes:
        return
    if topo.zone and all(node.zone is None for node in nodes.values()):
        issues.append(
            Issue(
                object="cluster",
                message=f"every node lacks the zone label {topo.zone!r} (policy topology.zone): "
                "a node without it takes no new Redis pod; label each node with its zone, or, "
                'for a cluster in one zone, set topology.zone to "" and '
                "rules.replicaSeparation.zone to ignore",
            )
        )
        return
    rack_in_use = bool(topo.rack) and policy.level_in_use("rack")
    labelled_rack = rack_in_use and any(n.labels.get(topo.rack) for n in nodes.values())
    if rack_in_use and not labelled_rack:
        issues.append(
            Issue(
                object="cluster",
                message=f"no node has the rack label {topo.rack!r}: each zone counts as one rack",
                severity="warning",
            )
        )
    for name, node in sorted(nodes.items()):
        if node.zone is None:
            issues.append(
                Issue(
                    object=f"node {name}",
                    message=f"label {topo.zone!r} (zone) is {_missing_or_empty(node, topo.zone)}: "
                    "the node takes no new managed pod",
                    severity="warning",
                )
            )
        elif labelled_rack and not node.labels.get(topo.rack):
            issues.append(
                Issue(
                    object=f"node {name}",
                    message=f"label {topo.rack!r} (rack) is {_missing_or_empty(node, topo.rack)}: "
                    "counted as one rack with its whole zone",
                    severity="warning",
                )
            )


def _missing_or_empty(node: Node, key: str) -> str:
    return "empty" if key in node.labels else "missing"
