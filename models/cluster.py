"""Nodes, pods and the Redis members among them: what a snapshot holds."""

from enum import StrEnum
from functools import cached_property
from typing import Literal

from models.base import Value
from models.resources import ZERO, Resources


class Role(StrEnum):
    MASTER = "master"
    REPLICA = "replica"


class Taint(Value):
    key: str
    value: str | None = None
    effect: str


class Toleration(Value):
    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None


class SelectorRequirement(Value):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class SelectorTerm(Value):
    """One nodeSelectorTerm: its expressions and fields must all match."""

    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()


class FreeVolume(Value):
    """An Available PV bound to no claim: a place where a ``local`` claim may be bound."""

    name: str
    storage_class: str
    capacity: int
    access_modes: tuple[str, ...] = ()
    terms: tuple[SelectorTerm, ...] = ()
    """The PV's required node affinity (ORed terms); empty: every node."""


class VolumeRule(Value):
    """What a claim asks of its pod's node, names aside, so that pods asking alike group."""

    kind: Literal["bound", "local", "zonal", "held"]
    terms: tuple[SelectorTerm, ...] = ()
    """``bound``: the PV's node affinity; ``zonal``: the class's allowed topologies."""
    pool: str = ""
    """``local``: the storage class whose free PVs the claim takes."""
    volumes: tuple[FreeVolume, ...] = ()
    """``local``: the free PVs that match the claim."""
    reason: str = ""
    """``held``: why the pod cannot be placed."""

    @cached_property
    def hash_key(self) -> int:
        """Worked out once: rules group pods, and a local rule lists every matching free PV."""
        return hash(
            (self.kind, self.terms, self.pool, self.reason, len(self.volumes), self.volumes[:1])
        )

    def __hash__(self) -> int:
        return self.hash_key


class VolumeNeed(Value):
    claim: str
    """``namespace/name`` of the claim."""
    volume: str | None = None
    """The PV it is bound to, when bound."""
    rule: VolumeRule


class Node(Value):
    name: str
    labels: dict[str, str] = {}
    allocatable: Resources = ZERO
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    zone: str | None = None
    """None when the zone label is missing: the node then takes no new managed pod."""
    rack: str = ""
    """The rack label, or ``<zone>/*`` when it is missing (a rack lies inside its zone)."""
    host: str = ""
    kubelet_version: str = ""
    """``status.nodeInfo.kubeletVersion``: an upgrade brings nodes of a newer one."""

    def domain(self, level: str) -> str | None:
        if level == "zone":
            return self.zone
        if level == "rack":
            return self.rack
        return self.host


class Pod(Value):
    namespace: str
    name: str
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    node_name: str | None = None
    phase: str = "Pending"
    requests: Resources = Resources(pods=1)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = {}
    affinity_terms: tuple[SelectorTerm, ...] = ()
    """Required nodeAffinity terms (ORed). Empty means no constraint."""
    scheduler_name: str = "default-scheduler"
    scheduling_gates: tuple[str, ...] = ()
    owner_kind: str | None = None
    owner_name: str | None = None
    pod_ip: str | None = None
    resource_version: str = ""
    deleting: bool = False
    claims: tuple[str, ...] = ()
    """Names of the PersistentVolumeClaims it mounts (models/volumes.py)."""
    volumes: tuple[VolumeNeed, ...] = ()
    """What those claims ask of its node, once read with the snapshot's PVs and classes."""

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        return self.node_name is None


class Member(Value):
    """A managed Redis pod and its place in a Redis cluster."""

    pod: Pod
    cluster: str
    """``namespace/<cluster label>``: Redis clusters are namespaced like their pods."""
    shard: str
    role: Role | None
    """None for a pending pod whose role is not decided yet: the solver picks one master."""
    shard_size: int | None = None
    """Expected members (``redis-placer.io/shard-size`` annotation, a StatefulSet, the
    formation), when known."""
    ordered: bool = False
    """The shard's missing members can appear only after the present ones run (an OrderedReady
    StatefulSet, followers made after leaders): placed member by member, never held whole."""

    @cached_property
    def key(self) -> str:
        return self.pod.key

    @cached_property
    def shard_key(self) -> str:
        return f"{self.cluster}/{self.shard}"
