"""Builders of PersistentVolume, PersistentVolumeClaim and StorageClass objects, shaped like
``kubectl get pv,pvc,storageclasses -o json`` output, for the volume tests."""

from collections.abc import Sequence
from typing import Any

from tests.kube_dicts import HOST_LABEL, ZONE_LABEL

NO_PROVISIONER = "kubernetes.io/no-provisioner"


def storage_class(
    name: str,
    provisioner: str = NO_PROVISIONER,
    mode: str = "WaitForFirstConsumer",
    zones: Sequence[str] = (),
    default: bool = False,
) -> dict[str, Any]:
    """A StorageClass; ``zones`` become its allowedTopologies on the zone label."""
    obj: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if default:
        obj["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if zones:
        obj["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE_LABEL, "values": list(zones)}]}
        ]
    return obj


def local_pv(
    name: str,
    node: str | None = None,
    zone: str | None = None,
    storage_class: str = "local-nvme",
    capacity: str = "10Gi",
    claim: str | None = None,
    modes: Sequence[str] = ("ReadWriteOnce",),
) -> dict[str, Any]:
    """A PV pinned to one node (hostname) or one zone; ``claim`` ("ns/name") binds it."""
    expressions = []
    if node is not None:
        expressions.append({"key": HOST_LABEL, "operator": "In", "values": [node]})
    if zone is not None:
        expressions.append({"key": ZONE_LABEL, "operator": "In", "values": [zone]})
    spec: dict[str, Any] = {
        "storageClassName": storage_class,
        "capacity": {"storage": capacity},
        "accessModes": list(modes),
    }
    if expressions:
        spec["nodeAffinity"] = {
            "required": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        }
    if claim is not None:
        ns, _, claim_name = claim.partition("/")
        spec["claimRef"] = {"namespace": ns, "name": claim_name}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"phase": "Bound" if claim else "Available"},
    }


def claim(
    name: str,
    storage_class: str | None = "local-nvme",
    volume: str | None = None,
    request: str = "5Gi",
    namespace: str = "default",
    modes: Sequence[str] = ("ReadWriteOnce",),
) -> dict[str, Any]:
    """A PVC; ``volume`` binds it to that PV."""
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": request}},
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume is not None:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def mounts(*claims: str) -> dict[str, Any]:
    """``spec`` keys for ``redis_pod(**mounts(...))``: volumes mounting these claims."""
    return {
        "volumes": [
            {"name": f"data{i}", "persistentVolumeClaim": {"claimName": c}}
            for i, c in enumerate(claims)
        ]
    }
