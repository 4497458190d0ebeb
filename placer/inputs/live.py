"""A snapshot read from a live cluster, through the one Kubernetes adapter."""

from typing import TYPE_CHECKING

from models.errors import InputError
from models.kube_objects import build_snapshot
from models.policy import Policy
from models.snapshot import Snapshot
from placer.inputs.content import LIVE_HINT, require_content

if TYPE_CHECKING:  # the Kubernetes client is imported only when a cluster is read
    from placer.kube.adapter import KubeAdapter, KubernetesAdapter


def snapshot_from_adapter(
    adapter: "KubeAdapter",
    policy: Policy,
    *,
    allow_empty: bool = False,
    need_pods: bool = True,
    namespace: str | None = None,
) -> Snapshot:
    """Nodes, pods, StatefulSets and volumes (PVs, claims, classes), as the binder reads them (``placer.binder.cache``).

    A StatefulSet's replicas give the size of a shard whose pods lack the
    ``redis-placer.io/shard-size`` annotation, so a live snapshot and the binder agree. Unless
    ``allow_empty``, a cluster without nodes (or, with ``need_pods``, without selected pods) is an
    error (placer.inputs.content).

    With ``namespace``, the Redis pods are that namespace's and its StatefulSets alone are read;
    the pods of every namespace are still read, since their requests take room on the nodes.
    """
    objects = [
        *adapter.list_nodes(),
        *adapter.list_pods(),
        *adapter.list_statefulsets(namespace=namespace),
        *adapter.list_volume_objects(),
    ]
    snapshot = build_snapshot(objects, policy, namespace=namespace)
    if not allow_empty:
        require_content(
            objects,
            snapshot,
            policy,
            "cluster",
            LIVE_HINT,
            need_pods=need_pods,
            namespace=namespace,
        )
    return snapshot


DUMP_INSTEAD = "pass -f FILE to read a dump instead"
"""What a command that also reads a dump (``-f``) says when it cannot reach a cluster."""
LIVE_ONLY = (
    "it works on a live cluster only: run it in the cluster, or pass --kubeconfig FILE or "
    "--context NAME"
)
"""What a command with no ``-f`` (binder, release-gates) says when it cannot reach a cluster."""


def connect(
    kubeconfig: str | None,
    context: str | None,
    *,
    pool_size: int = 16,
    instead: str = DUMP_INSTEAD,
) -> "KubernetesAdapter":
    """The adapter for the cluster of the kubeconfig (or the in-cluster service account), with
    connections for ``pool_size`` requests at once; ``instead``: what to do when there is none,
    in the command's own options."""
    from placer.kube.adapter import KubernetesAdapter
    from placer.kube.config import KubeConfigError, load_api_client

    try:
        return KubernetesAdapter(load_api_client(kubeconfig, context, pool_size=pool_size))
    except KubeConfigError as exc:
        raise InputError(f"cannot reach a cluster ({exc}); {instead}") from None


def read_cluster(
    adapter: "KubeAdapter",
    policy: Policy,
    *,
    allow_empty: bool,
    need_pods: bool = True,
    namespace: str | None = None,
) -> Snapshot:
    from placer.kube.adapter import KubeApiError

    try:
        return snapshot_from_adapter(
            adapter, policy, allow_empty=allow_empty, need_pods=need_pods, namespace=namespace
        )
    except KubeApiError as exc:
        # A 403 (RBAC), a dead API server: one line naming the request, not a traceback.
        raise InputError(f"cannot read the cluster: {exc}") from None


def snapshot_from_cluster(
    policy: Policy,
    *,
    context: str | None = None,
    kubeconfig: str | None = None,
    allow_empty: bool = False,
    need_pods: bool = True,
    namespace: str | None = None,
) -> Snapshot:
    return read_cluster(
        connect(kubeconfig, context),
        policy,
        allow_empty=allow_empty,
        need_pods=need_pods,
        namespace=namespace,
    )
