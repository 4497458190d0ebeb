"""The Kubernetes edge: every API call lives in ``adapter`` (and the Lease in ``leader``)."""

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
