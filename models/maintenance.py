"""Which nodes a planned disruption is about to empty: cordoned, or tainted by the tools that
drain and delete nodes (cluster-autoscaler, Karpenter, node-pool upgrades).

Their Redis pods are "going": a master there hands its role over before it stops, and no
replica there is chosen to take a role. Nodes an upgrade has superseded (their pool already has
nodes of a newer kubelet) are drained next: a pod placed there would be evicted twice."""

import re
from collections.abc import Iterable

from models.cluster import Node

DISRUPTION_TAINTS: frozenset[str] = frozenset(
    {
        "node.kubernetes.io/unschedulable",  # kubectl cordon / drain
        "ToBeDeletedByClusterAutoscaler",  # cluster-autoscaler scale-down, about to drain
        "karpenter.sh/disrupted",  # Karpenter v1 consolidation, drift, expiry
        "karpenter.sh/disruption",  # Karpenter before v1 (value "disrupting")
        "node.cloudprovider.kubernetes.io/shutdown",  # the cloud provider stops the node
        "node.kubernetes.io/out-of-service",  # an operator takes the node out for good
        "cloud.google.com/impending-node-termination",  # GKE node termination handler
        "aws-node-termination-handler/spot-itn",  # AWS spot interruption notice
        "aws-node-termination-handler/scheduled-maintenance",
        "aws-node-termination-handler/rebalance-recommendation",
        "aws-node-termination-handler/asg-lifecycle-termination",
    }
)
"""Taint keys that announce a node will be drained or deleted soon (any effect)."""


def node_going(node: Node) -> bool:
    """The node is cordoned or tainted for disruption: its pods will stop soon."""
    return node.unschedulable or any(t.key in DISRUPTION_TAINTS for t in node.taints)


def going_reason(node: Node) -> str:
    """Why ``node`` counts as going, for messages and Events."""
    if node.unschedulable:
        return f"node {node.name} is cordoned"
    keys = sorted(t.key for t in node.taints if t.key in DISRUPTION_TAINTS)
    return f"node {node.name} is tainted {keys[0]}" if keys else f"node {node.name} stays"


POOL_LABELS: tuple[str, ...] = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "alpha.eksctl.io/nodegroup-name",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "node.kubernetes.io/pool",
)
"""Labels naming a node's pool, the unit a node-pool upgrade replaces; a node with none of
them is in the cluster's one unnamed pool."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def kubelet_release(version: str) -> tuple[int, int, int] | None:
    """``v1.36.2-eks-1a2b3c`` -> (1, 36, 2); None when it names no release."""
    found = _VERSION.match(version)
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch)


def pool_of(node: Node) -> str:
    return next((f"{k}={node.labels[k]}" for k in POOL_LABELS if k in node.labels), "")


def superseded_nodes(nodes: Iterable[Node]) -> frozenset[str]:
    """Nodes whose pool has a Ready node of a newer kubelet release: the upgrade under way
    replaces them next. A pool of one release supersedes nothing."""
    listed = [(n, pool_of(n), kubelet_release(n.kubelet_version)) for n in nodes]
    newest: dict[str, tuple[int, int, int]] = {}
    for node, pool, release in listed:
        if release is not None and node.ready and release > newest.get(pool, (-1, 0, 0)):
            newest[pool] = release
    return frozenset(
        node.name
        for node, pool, release in listed
        if release is not None and release < newest.get(pool, release)
    )
