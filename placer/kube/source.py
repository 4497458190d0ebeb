"""Where a reader of the cluster gets its nodes, managed pods and StatefulSets.

One seam, two sources: ``ListedObjects`` lists them from the API server (a command run once,
``maintenance check``); in the binder's process the watch cache serves them instead
(``placer.binder.shared.CachedObjects``), so a reader that runs every few seconds on every
replica (the maintenance guard) costs the API server nothing for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from placer.kube.objects import label_selector

if TYPE_CHECKING:  # the Kubernetes client is imported by what talks to a cluster
    from placer.kube.adapter import KubeAdapter


@dataclass(frozen=True)
class ClusterObjects:
    """Every node, the pods a selector selects, and every StatefulSet, as API dicts (shared
    with whoever read them: never mutate them)."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    statefulsets: list[dict[str, Any]]


class ObjectSource(Protocol):
    def read_objects(self, selector: Mapping[str, str]) -> ClusterObjects:
        """Nodes, the pods whose labels include ``selector``, StatefulSets; raises when the
        cluster cannot be read."""
        ...


class ListedObjects:
    """Each read lists them from the API server: three requests, every node among them."""

    def __init__(self, adapter: KubeAdapter) -> None:
        self.adapter = adapter

    def nodes(self) -> list[dict[str, Any]]:
        return self.adapter.list_nodes()

    def pods(self, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        return self.adapter.list_pods(label_selector=label_selector(selector) or None)

    def statefulsets(self) -> list[dict[str, Any]]:
        return self.adapter.list_statefulsets()

    def read_objects(self, selector: Mapping[str, str]) -> ClusterObjects:
        return ClusterObjects(self.nodes(), self.pods(selector), self.statefulsets())


__all__ = ["ClusterObjects", "ListedObjects", "ObjectSource"]
