"""Which nodes a planned disruption is about to empty: cordoned, or tainted by the tools that
drain and delete nodes (cluster-autoscaler, Karpenter, node-pool upgrades).

Their Redis pods are "going": a master there hands its role over before it stops, and no
replica there is chosen to take a role."""

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
