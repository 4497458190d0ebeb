"""A snapshot read from a live cluster, through the one Kubernetes adapter."""

from typing import TYPE_CHECKING

from models.errors import InputError
from models.kube_objects import build_snapshot
from models.policy import Policy
from models.snapshot import Snapshot

if TYPE_CHECKING:  # the Kubernetes client is imported only when a cluster is read
    from placer.kube.adapter import KubeAdapter


def snapshot_from_adapter(adapter: "KubeAdapter", policy: Policy) -> Snapshot:
    """Nodes, pods and StatefulSets, as the binder reads them (``placer.binder.cache``).

    A StatefulSet's replicas give the size of a shard whose pods lack the
    ``redis-placer.io/shard-size`` annotation, so a live snapshot and the binder agree.
    """
    objects = [*adapter.list_nodes(), *adapter.list_pods(), *adapter.list_statefulsets()]
    return build_snapshot(objects, policy)


def snapshot_from_cluster(
    policy: Policy, *, context: str | None = None, kubeconfig: str | None = None
) -> Snapshot:
    from placer.kube.adapter import KubeApiError, KubernetesAdapter
    from placer.kube.config import KubeConfigError, load_api_client

    try:
        client = load_api_client(kubeconfig, context)
    except KubeConfigError as exc:
        raise InputError(
            f"cannot reach a cluster ({exc}); pass -f FILE to plan from a dump"
        ) from None
    try:
        return snapshot_from_adapter(KubernetesAdapter(client), policy)
    except KubeApiError as exc:
        # A 403 (RBAC), a dead API server: one line naming the request, not a traceback.
        raise InputError(f"cannot read the cluster: {exc}") from None
