"""The binder's volumes: PVs, claims and classes in its snapshot, and the pods bind mode refuses.

The binder lists the three kinds when one of its pending pods mounts a claim (a snapshot of a
cluster without volumes costs nothing more), so its plans put each pod where its volumes can be
(models/volumes.py, solver/volumes.py).

In bind mode the binder is the pod's scheduler, and kube-scheduler's volume binding (choosing a
PV for a ``WaitForFirstConsumer`` claim, writing ``volume.kubernetes.io/selected-node`` for the
provisioner) does not run. The binder does not take that job over: a pod whose claim is not
bound yet is refused with an Event that points to gate mode, where kube-scheduler binds both the
pod and its volume on the node the plan chose. A pod whose claims are all bound is placed (its
PVs' node affinity is part of the plan) and bound as any other.
"""

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from models.cluster import Pod

if TYPE_CHECKING:
    from placer.kube.adapter import KubeAdapter

GATE_MODE_HINT = (
    "in --enforce bind the binder binds no volume; run the binder with --enforce gate (pods "
    "created with its scheduling gate) so kube-scheduler binds the claim on the node the plan "
    "chose"
)


REFRESH_SECONDS = 5.0
"""How long a snapshot holding volumes is reused: claims bind and PVs appear without any pod
changing, and the binder watches pods only."""


def volume_epoch(listed: bool, now: float) -> int:
    """Part of the binder's snapshot key: it turns over every ``REFRESH_SECONDS`` while the
    last snapshot listed volumes, so a held pod sees its claim bound."""
    return int(now // REFRESH_SECONDS) if listed else 0


def volume_inputs(
    adapter: "KubeAdapter", ours: list[Pod], bind_mode: bool
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], str]]:
    """(the volume objects for the snapshot, the pods of ours that bind mode refuses, with why)."""
    objects = read_volume_objects(adapter, ours)
    return objects, bind_mode_refusals(ours, objects) if bind_mode else {}


def read_volume_objects(adapter: "KubeAdapter", pods: Iterable[Pod]) -> list[dict[str, Any]]:
    """PVs, claims and classes when one of ``pods`` mounts a claim; otherwise nothing."""
    if not any(p.claims for p in pods):
        return []
    return adapter.list_volume_objects()


def bind_mode_refusals(
    pods: Iterable[Pod], volume_objects: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], str]:
    """(namespace, name) -> why bind mode cannot place the pod: a claim not bound yet."""
    bound: set[str] = set()
    present: set[str] = set()
    for obj in volume_objects:
        if obj.get("kind") != "PersistentVolumeClaim":
            continue
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        present.add(key)
        if (obj.get("spec") or {}).get("volumeName"):
            bound.add(key)
    refused: dict[tuple[str, str], str] = {}
    for pod in pods:
        waiting = [
            f"{pod.namespace}/{c}" for c in pod.claims if f"{pod.namespace}/{c}" not in bound
        ]
        if not waiting:
            continue
        missing = [c for c in waiting if c not in present]
        state = "does not exist yet" if missing else "is not bound to a volume yet"
        refused[(pod.namespace, pod.name)] = f"claim {waiting[0]} {state}: {GATE_MODE_HINT}"
    return refused
