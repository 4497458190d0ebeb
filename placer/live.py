"""A snapshot read from a live cluster, through the one Kubernetes adapter."""

from models.errors import InputError
from models.kube_objects import build_snapshot
from models.policy import Policy
from models.snapshot import Snapshot


def snapshot_from_adapter(adapter: object, policy: Policy) -> Snapshot:
    objects = list(adapter.list_nodes()) + list(adapter.list_pods())  # type: ignore[attr-defined]
    return build_snapshot(objects, policy)


def snapshot_from_cluster(
    policy: Policy, *, context: str | None = None, kubeconfig: str | None = None
) -> Snapshot:
    from placer.kube.adapter import KubernetesAdapter
    from placer.kube.config import KubeConfigError, load_api_client

    try:
        client = load_api_client(kubeconfig, context)
    except KubeConfigError as exc:
        raise InputError(
            f"cannot reach a cluster ({exc}); pass -f FILE to plan from a dump"
        ) from None
    return snapshot_from_adapter(KubernetesAdapter(client), policy)
