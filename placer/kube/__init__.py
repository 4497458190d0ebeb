"""The Kubernetes edge: every API call lives in ``adapter`` (and the Lease in ``leader``).

The names below are imported from their modules when first used, not with the package: the
Kubernetes client takes most of a second to import, and a command that never talks to a
cluster (``pdbs -f``, which only needs ``placer.kube.pdb``) must not pay for it.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placer.kube.adapter import (
        COMPONENT_CALLS,
        REQUIRED_PERMISSIONS,
        BindOutcome,
        BindResult,
        EvictOutcome,
        EvictResult,
        KubeAdapter,
        KubeApiError,
        KubernetesAdapter,
        PatchOutcome,
        PatchResult,
        Permission,
        WatchEvent,
        WatchExpired,
        permissions_for,
    )
    from placer.kube.config import KubeConfigError, load_api_client
    from placer.kube.leader import LeaderConfig, LeaderElector, run_with_leader_election

_WHERE = {
    **dict.fromkeys(
        (
            "COMPONENT_CALLS",
            "REQUIRED_PERMISSIONS",
            "BindOutcome",
            "BindResult",
            "EvictOutcome",
            "EvictResult",
            "KubeAdapter",
            "KubeApiError",
            "KubernetesAdapter",
            "PatchOutcome",
            "PatchResult",
            "Permission",
            "WatchEvent",
            "WatchExpired",
            "permissions_for",
        ),
        "placer.kube.adapter",
    ),
    **dict.fromkeys(("KubeConfigError", "load_api_client"), "placer.kube.config"),
    **dict.fromkeys(
        ("LeaderConfig", "LeaderElector", "run_with_leader_election"), "placer.kube.leader"
    ),
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = [
    "COMPONENT_CALLS",
    "REQUIRED_PERMISSIONS",
    "BindOutcome",
    "BindResult",
    "EvictOutcome",
    "EvictResult",
    "KubeAdapter",
    "KubeApiError",
    "KubeConfigError",
    "KubernetesAdapter",
    "LeaderConfig",
    "LeaderElector",
    "PatchOutcome",
    "PatchResult",
    "Permission",
    "WatchEvent",
    "WatchExpired",
    "load_api_client",
    "permissions_for",
    "run_with_leader_election",
]
