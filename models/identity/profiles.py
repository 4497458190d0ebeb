"""Built-in identity profiles: how each deployment people run labels and forms its pods.

A profile is a partial policy. ``identity.profile: NAME`` in a policy file fills in every key of
``selector``, ``labels`` and ``identity`` that the file leaves out; ``redis-placer policy
--print-defaults --profile NAME`` prints the result. The facts come from each deployment's own
sources (docs/profiles/NAME.md).
"""

from collections.abc import Mapping
from typing import Any

PROFILES: dict[str, dict[str, Any]] = {
    "labels": {
        "selector": {"app": "redis"},
        "labels": {"cluster": "redis-cluster", "shard": "redis-shard", "role": "redis-role"},
        "identity": {"formation": "labels"},
    },
    "ot-operator": {
        # Pods of <cr>-leader and <cr>-follower: cluster=<cr>, role=leader|follower,
        # redis_setup_type=cluster; redis-role=master|slave once the operator has formed it.
        "selector": {"redis_setup_type": "cluster"},
        "labels": {"cluster": "cluster", "shard": "redis-shard", "role": "redis-role"},
        "identity": {
            "formation": "leader-follower",
            "clusterSuffixes": ["-leader", "-follower"],
            "formationRole": {
                "label": "role",
                "values": {"leader": "master", "follower": "replica"},
            },
            "replicasPerShard": 1,
            "orderedCreation": "always",
        },
    },
    "bitnami": {
        # One Parallel StatefulSet of cluster.nodes pods, formed by pod 0's redis-cli --cluster
        # create with --cluster-replicas cluster.replicas (1 by default).
        "selector": {"app.kubernetes.io/name": "redis-cluster"},
        "labels": {
            "cluster": "app.kubernetes.io/instance",
            "shard": "redis-shard",
            "role": "redis-role",
        },
        "identity": {"formation": "create-order", "replicasPerShard": 1},
    },
    "valkey-io": {
        # One StatefulSet of one pod per member; node-index 0 of a shard is its first primary.
        "selector": {
            "app.kubernetes.io/name": "valkey",
            "app.kubernetes.io/component": "valkey-node",
        },
        "labels": {
            "cluster": "valkey.io/cluster",
            "shard": "valkey.io/shard-index",
            "role": "redis-role",
        },
        "identity": {
            "formation": "labels",
            "memberIndexLabel": "valkey.io/node-index",
            "orderedCreation": "never",
        },
    },
    "hyperspike": {
        # One Parallel StatefulSet of shards * (replicas + 1) pods; shard = ordinal mod shards.
        # Which member the operator makes primary is not fixed: the first ordinals are a guess
        # until --roles redis reads it.
        "selector": {"app.kubernetes.io/name": "valkey", "app.kubernetes.io/component": "valkey"},
        "labels": {
            "cluster": "app.kubernetes.io/instance",
            "shard": "redis-shard",
            "role": "redis-role",
        },
        "identity": {"formation": "ordinal-modulo", "replicasPerShard": 1},
    },
}
CUSTOM = "custom"
"""A profile name that fills in nothing: the file says every key it needs."""


def names() -> list[str]:
    return [*PROFILES, CUSTOM]


def with_profile(data: Mapping[str, Any]) -> dict[str, Any]:
    """The policy document with its profile's settings under the keys it leaves out."""
    identity = data.get("identity")
    name = identity.get("profile") if isinstance(identity, Mapping) else None
    if name is None or name == CUSTOM:
        return dict(data)
    if not isinstance(name, str) or name not in PROFILES:
        raise ValueError(f"is {name!r}, not one of {', '.join(names())}")
    return _merged(PROFILES[name], data)


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        if key != "selector" and isinstance(below, Mapping) and isinstance(value, Mapping):
            out[key] = _merged(below, value)
        else:
            out[key] = value
    return out
