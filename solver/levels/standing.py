"""The running cluster's Standing kept across solves: per shard, what its staying members add.

On a large cluster the walk over every running member is most of the levels' preparation for a
small batch, and from one batch to the next only a few shards and nodes change. The cache keeps
each shard's share of the totals and replaces only the shards ``update`` is told were touched
(a node added, changed or gone: every shard bound to it; a pod: its shard), so ``standing``
gives exactly the ``Standing`` a full walk (shapes.build_shapes) would.
"""

from collections.abc import Iterable

from models.snapshot import Snapshot
from solver.levels.shapes import Standing, _walk


class StandingCache:
    """``Standing`` of one snapshot, kept per shard; valid for the snapshot last updated to."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._parts: dict[str, Standing] = {}
        self._members: dict[str, dict[str, int]] = {}
        """Per node: the shards with members staying there (``used`` has it while any does)."""
        self._binds: dict[str, set[str]] = {}
        """Per shard: the node names its members are bound to."""
        self._bound: dict[str, set[str]] = {}
        """Per node name, in the snapshot or not: shards with a member bound to it."""
        self._used: dict[str, list[int]] = {}
        self._masters_on: dict[str, int] = {}
        self._pairs = {"rack": 0, "zone": 0}
        self._zone_members: dict[tuple[str, str], int] = {}
        self._refresh(snapshot, set(snapshot.shards))

    def update(
        self, snapshot: Snapshot, nodes: Iterable[str] = (), shards: Iterable[str] = ()
    ) -> None:
        """Take a new snapshot in which only ``nodes`` and ``shards`` differ."""
        touched = set(shards)
        for name in nodes:
            touched |= self._bound.get(name, set())
        self.snapshot = snapshot
        self._refresh(snapshot, touched)

    def standing(self, snapshot: Snapshot) -> Standing | None:
        """The Standing of ``snapshot``, or None when the cache holds another one."""
        if snapshot is not self.snapshot:
            return None
        parts = self._parts
        masters = [entry for key in snapshot.shards for entry in parts[key].masters]
        return Standing(
            used={name: list(total) for name, total in self._used.items()},
            masters_on=dict(self._masters_on),
            masters=masters,
            pairs=dict(self._pairs),
            zone_members=dict(self._zone_members),
        )

    def _refresh(self, snapshot: Snapshot, shards: set[str]) -> None:
        for key in shards:
            old = self._parts.pop(key, None)
            if old is not None:
                self._add(key, old, -1)
        nodes = snapshot.node_by_name
        grouped = snapshot.shards
        for key in shards:
            members = grouped.get(key)
            if not members:
                continue
            part = Standing()
            _walk(members, nodes, part)
            self._binds[key] = {m.pod.node_name for m in members if m.pod.node_name}
            self._parts[key] = part
            self._add(key, part, 1)

    def _add(self, key: str, part: Standing, sign: int) -> None:
        for name, total in part.used.items():
            mine = self._used.setdefault(name, [0, 0, 0])
            for i in range(3):
                mine[i] += sign * total[i]
            on = self._members.setdefault(name, {})
            on[key] = on.get(key, 0) + sign
            if not on[key]:
                del on[key]
            if not on:
                del self._members[name]
                del self._used[name]
        for name, n in part.masters_on.items():
            left = self._masters_on.get(name, 0) + sign * n
            if left:
                self._masters_on[name] = left
            else:
                self._masters_on.pop(name, None)
        for level in ("rack", "zone"):
            self._pairs[level] += sign * part.pairs[level]
        for at, n in part.zone_members.items():
            left = self._zone_members.get(at, 0) + sign * n
            if left:
                self._zone_members[at] = left
            else:
                self._zone_members.pop(at, None)
        names = self._binds.get(key, set()) if sign > 0 else self._binds.pop(key, set())
        for name in names:
            bound = self._bound.setdefault(name, set())
            if sign > 0:
                bound.add(key)
            else:
                bound.discard(key)
                if not bound:
                    del self._bound[name]
