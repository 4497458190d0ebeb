"""A cluster as read at one instant: the solver's whole input besides the policy."""

from functools import cached_property

from pydantic import ConfigDict

from models.base import Value
from models.cluster import FreeVolume, Member, Node, Pod
from models.maintenance import superseded_nodes


class Issue(Value):
    """Input that was skipped or distrusted, with why. Nothing running is touched because of it."""

    object: str
    message: str
    severity: str = "error"


class Snapshot(Value):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    nodes: tuple[Node, ...] = ()
    members: tuple[Member, ...] = ()
    other_pods: tuple[Pod, ...] = ()
    """Bound pods that are not managed Redis pods: they consume node capacity."""
    issues: tuple[Issue, ...] = ()
    skipped_members: tuple[Member, ...] = ()
    """Members of shards left out because their roles contradict (two masters, a running pod
    without a role): never planned (their running pods are in ``other_pods`` as load), but
    judged by the audit, which must see a shard running two masters."""
    free_volumes: tuple[FreeVolume, ...] = ()
    """Available PVs bound to no claim: where unbound ``local`` claims may be bound."""

    @cached_property
    def superseded(self) -> frozenset[str]:
        """Nodes an upgrade under way replaces next (models/maintenance.py)."""
        return superseded_nodes(self.nodes)

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}

    @cached_property
    def shards(self) -> dict[str, list[Member]]:
        """Members grouped by ``cluster/shard``, in a stable order."""
        grouped: dict[str, list[Member]] = {}
        for member in sorted(self.members, key=lambda m: (m.shard_key, m.key)):
            grouped.setdefault(member.shard_key, []).append(member)
        return grouped

    @cached_property
    def pending(self) -> list[Member]:
        """Cached: every solve asks several times, and a large cluster has thousands."""
        return [m for m in self.members if m.pod.pending]

    @cached_property
    def running(self) -> list[Member]:
        return [m for m in self.members if not m.pod.pending]
