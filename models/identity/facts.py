"""What identity is read from: a pod's labels and StatefulSet ordinal, and its StatefulSet."""

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.cluster import Pod, Role
from models.identity.config import RoleName

POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
"""Set by the StatefulSet controller on every pod it creates (GA in Kubernetes 1.32)."""
_ORDINAL = re.compile(r"-(0|[1-9][0-9]*)$", re.ASCII)
_NUMBER = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_POSITIVE = re.compile(r"[1-9][0-9]*", re.ASCII)


def number(raw: str | None) -> int | None:
    """A non-negative integer written as Kubernetes writes one (ASCII digits, no sign)."""
    return int(raw) if raw is not None and _NUMBER.fullmatch(raw) else None


def positive(raw: str) -> int | None:
    return int(raw) if _POSITIVE.fullmatch(raw) else None


@dataclass(frozen=True)
class StatefulSetFacts:
    """The parts of a StatefulSet that say how many members come and in what order."""

    namespace: str
    name: str
    replicas: int | None
    ordered: bool
    """podManagementPolicy OrderedReady (Kubernetes' default): pod N+1 only once N is Ready."""


def statefulset_facts(obj: Mapping[str, Any]) -> StatefulSetFacts:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    replicas = spec.get("replicas")
    policy = spec.get("podManagementPolicy") or "OrderedReady"
    return StatefulSetFacts(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name")),
        replicas=replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None,
        ordered=policy == "OrderedReady",
    )


def ordinal(pod: Pod) -> int | None:
    """The pod's StatefulSet ordinal: its pod-index label, or its name's numeric suffix."""
    index = number(pod.labels.get(POD_INDEX_LABEL))
    if index is not None:
        return index
    if pod.owner_kind == "StatefulSet" and pod.owner_name:
        match = _ORDINAL.search(pod.name)
        if match and pod.name[: match.start()] == pod.owner_name:
            return int(match.group(1))
    return None


def role_of(value: str | None, values: Mapping[str, RoleName]) -> Role | None:
    """The role a label value means, case-insensitively; None when it means none."""
    if value is None:
        return None
    return _by_lowered_value(tuple(values.items())).get(value.lower())


@functools.lru_cache(maxsize=64)
def _by_lowered_value(values: tuple[tuple[str, RoleName], ...]) -> dict[str, Role]:
    """Read once per policy, not once per pod: 15,000 pods ask the same few values."""
    return {k.lower(): Role(v) for k, v in values if v}
