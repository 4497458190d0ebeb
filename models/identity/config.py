"""The policy's ``identity`` block: how a pod's Redis cluster, shard and role are read.

Operators and charts label their pods their own way; a profile (``models.identity.profiles``)
fills this block in for one of them, and a deployment that is not listed writes its own.
"""

from typing import Literal

from pydantic import Field

from models.base import Wire

Formation = Literal["labels", "leader-follower", "create-order", "ordinal-modulo"]
"""How the shard and the role at creation follow from what a pod carries:

- ``labels``: the shard is the ``labels.shard`` label (and, with ``memberIndexLabel``, member 0
  of a shard is its first master);
- ``leader-follower``: two StatefulSets, leaders and followers (``formationRole`` tells them
  apart); leader ``i`` is the master of shard ``i``, follower ``j`` replicates leader ``j mod
  leaders``;
- ``create-order``: one StatefulSet formed by ``redis-cli --cluster create`` over its pods in
  ordinal order with ``--cluster-replicas replicasPerShard``;
- ``ordinal-modulo``: one StatefulSet of ``shards * (replicasPerShard + 1)`` pods; shard = ordinal
  mod shards, the first ``shards`` ordinals are the masters.
"""
RoleName = Literal["master", "replica"]
OrderedCreation = Literal["auto", "always", "never"]

DEFAULT_ROLE_VALUES: dict[str, RoleName] = {
    "master": "master",
    "primary": "master",
    "replica": "replica",
    "slave": "replica",
}


class RoleLabel(Wire):
    """A label whose value tells a pod's role, read through ``values`` (case-insensitive)."""

    label: str = Field(min_length=1, description="The label key.")
    values: dict[str, RoleName] = Field(
        min_length=1, description="Each value the label takes, and the role it means."
    )


class Identity(Wire):
    """Where a pod's cluster, shard, role and shard size come from."""

    profile: str = Field(
        default="labels",
        description="A built-in profile (labels, ot-operator, bitnami, valkey-io, hyperspike) "
        "whose settings fill in every key of selector, labels and identity this file leaves "
        "out; custom for none.",
    )
    formation: Formation = Field(
        default="labels",
        description="How shard and role follow from the pods: labels, leader-follower, "
        "create-order or ordinal-modulo (docs/profiles).",
    )
    cluster_suffixes: tuple[str, ...] = Field(
        default=(),
        description="Suffixes cut from the labels.cluster value to name the Redis cluster; "
        "leader-follower also finds the followers' StatefulSet as <cluster><suffix> before "
        "its first pod exists (the OT operator's -leader and -follower).",
    )
    role_values: dict[str, RoleName] = Field(
        default_factory=lambda: dict(DEFAULT_ROLE_VALUES),
        description="Values of the labels.role label and the role each means "
        "(case-insensitive). That label is the role once the cluster has formed.",
    )
    formation_role: RoleLabel | None = Field(
        default=None,
        description="A label telling the role a pod is created for (the OT operator's "
        "role: leader | follower), read when labels.role is absent.",
    )
    member_index_label: str = Field(
        default="",
        description="labels formation: a label numbering the members of a shard from 0; member "
        "0 is created as the master, and a shard's size is one more than the highest number "
        "in its cluster.",
    )
    replicas_per_shard: int = Field(
        default=1,
        ge=0,
        le=64,
        description="Replicas of each master where the cluster does not show it: "
        "--cluster-replicas of create-order, the followers of leader-follower before their "
        "StatefulSet exists, and the replicas of ordinal-modulo.",
    )
    ordered_creation: OrderedCreation = Field(
        default="auto",
        description="Whether a shard's missing members can appear only after the present ones "
        "run (an OrderedReady StatefulSet, followers made after leaders): such shards are "
        "placed member by member against a plan of the whole shard, never held. auto: "
        "leader-follower always, otherwise when the pod's StatefulSet is OrderedReady.",
    )
