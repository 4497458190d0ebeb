"""The binder's watch cache lent to the other readers in its process (the maintenance guard of
``binder --guard``), as an ``ObjectSource``: nodes, managed pods and StatefulSets without a
request to the API server, on the leader and on a standby alike (both follow the watches).

What it hands out is what a list would have returned (the pods as the server sent them, none of
the binder's assumed bindings), and only while the cache is readable: while it is not (never
listed yet, a watch broken, a list failed; ``cluster_readable`` 0), each read is a list of its
own from the API server, exactly what the reader did before it had a cache, and what follows
when that list fails too is the reader's own unreadable path (the guard lets requests through).

StatefulSets have no watch: the cache lists them at each resync, and the binder again only when
it decides (the leader). Read here, they are listed again when older than ``statefulsets_every``
and once for each owner a selected pod names that the cache lacks, so a standby's are never
older than that either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from placer.binder.cache import ClusterCache
from placer.kube.source import ClusterObjects, ListedObjects

log = logging.getLogger(__name__)

STATEFULSETS_EVERY_S = 30.0
"""As the binder's own ``node_refresh_seconds``: a scaled StatefulSet is seen within this."""

_Key = tuple[str, str]


def _selected(pod: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _key(obj: Mapping[str, Any]) -> _Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _owners(pods: Iterable[Mapping[str, Any]]) -> set[_Key]:
    """The StatefulSets the pods name as their owners."""
    return {
        (_key(pod)[0], str(ref.get("name") or ""))
        for pod in pods
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
        if ref.get("kind") == "StatefulSet" and ref.get("name")
    }


class CachedObjects:
    """An ``ObjectSource`` over a ``ClusterCache``, with ``fallback`` listing while it cannot
    serve. A cache that follows one namespace (``binder -n``) serves nodes only: the reader
    keeps seeing the managed pods and StatefulSets of every namespace, listed."""

    def __init__(
        self,
        cache: ClusterCache,
        fallback: ListedObjects,
        statefulsets_every: float = STATEFULSETS_EVERY_S,
    ) -> None:
        self.cache = cache
        self.fallback = fallback
        self.statefulsets_every = statefulsets_every
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()
        self._sought: set[_Key] = set()
        """Owners listed once for already: a pod whose StatefulSet is gone costs one list."""
        self.served = 0
        self.listed = 0
        """Reads served from the cache, and reads listed because it could not serve them."""

    def read_objects(self, selector: Mapping[str, str]) -> ClusterObjects:
        held = self.cache.readable_objects()
        if held is None:
            with self._lock:
                self.listed += 1
            log.debug("cluster unreadable from the cache: listing")
            return self.fallback.read_objects(selector)
        nodes = sorted(held.nodes, key=lambda n: str((n.get("metadata") or {}).get("name", "")))
        if self.cache.namespace is not None:
            pods = self.fallback.pods(selector)
            statefulsets = self.fallback.statefulsets()
        else:
            pods = sorted((p for p in held.pods if _selected(p, selector)), key=_key)
            statefulsets = self._statefulsets(held.statefulsets, held.statefulsets_at, pods)
        with self._lock:
            self.served += 1
        return ClusterObjects(nodes, pods, sorted(statefulsets, key=_key))

    def _statefulsets(
        self, held: list[dict[str, Any]], listed_at: float, pods: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The cache's StatefulSets, listed again first when too old or lacking an owner."""
        unknown = _owners(pods) - {_key(s) for s in held}
        with self._lock:
            unknown -= self._sought
            self._sought |= unknown
        if not unknown and self.cache.clock() - listed_at < self.statefulsets_every:
            return held
        with self._refreshing:  # readers at once list them once
            age = self.cache.clock() - self.cache.statefulsets_at
            if unknown or age >= self.statefulsets_every:
                self.cache.refresh_statefulsets()  # if it fails, the cluster is unreadable
            return self.cache.objects_statefulsets()


__all__ = ["STATEFULSETS_EVERY_S", "CachedObjects"]
