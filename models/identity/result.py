"""What reading identity gives for one pod: where it belongs, or why it cannot be placed."""

from dataclasses import dataclass

from models.cluster import Role


@dataclass(frozen=True)
class Identified:
    cluster: str
    """The Redis cluster's name as the pods say it (namespaced by the caller)."""
    shard: str
    role: Role | None
    """None: not decided (a pending pod of the labels formation); the solver picks a master."""
    role_source: str
    """Where the role came from, for messages (``label redis-role``, ``formation``...)."""
    size: int | None = None
    size_source: str = ""
    ordered: bool = False
    """The shard's missing members appear only after the present ones run."""


@dataclass(frozen=True)
class Unidentified:
    """The pod cannot be read as a member: the message says which label or fact is missing."""

    message: str
