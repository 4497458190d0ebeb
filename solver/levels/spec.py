"""What one level of the topology tree is asked and what it answers.

A *bundle* is the pending members of one shard that a level places, with the shard's members
that stay (and where they are, if inside the parent domain); a *pattern* says how many of a
bundle's members of each kind and role go to each child domain; a *bundle type* groups the
interchangeable bundles, which share their patterns. solver/levels/patterns.py enumerates and
prices the patterns, solver/levels/model.py counts bundles per pattern with CP-SAT.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from models.cluster import Member, Role
from models.policy import Level
from solver.levels.shapes import PendingShard

UNPLACED = -1
"""The child index of a member left unplaced (allowPartialShards only)."""


@dataclass(frozen=True)
class Child:
    """One child domain of the parent: a zone of the cluster, or a rack of a zone."""

    name: str
    nodes: tuple[int, ...]
    """Room indexes (solver/levels/rooms.py) of its nodes that accept new members."""
    sub_domains: int
    """Domains of the next level down with room (racks of a zone): for lower bounds."""


@dataclass(frozen=True)
class Stay:
    """A member of the bundle's shard that stays where it runs, as this level sees it."""

    child: int | None
    """The child holding it, or None when it is outside the parent domain."""
    role: Role
    host: str
    sub_domain: str
    """Its domain one level down (its rack, seen from the zone level)."""


@dataclass(frozen=True)
class SubRoom:
    """One domain of the next level down inside a child (a rack of a zone), as the bound on
    its fullest sees it: the new masters its nodes can take, and the masters that stay there."""

    name: str
    master_room: int
    """New masters its nodes accept by the master cap (memory aside: an upper bound)."""
    fixed: dict[str, int]
    """Masters that stay in it, per Redis cluster."""


@dataclass
class Bundle:
    shard: PendingShard
    members: list[Member]
    kinds: list[int]
    roles: list[Role | None]
    """None: undecided, one of them becomes master (only when ``needs_master``)."""
    needs_master: bool
    stays: tuple[Stay, ...]
    whole: bool
    """Every member of the shard that could stay alive is inside the parent domain."""


@dataclass(frozen=True)
class Pattern:
    counts: tuple[tuple[int, int, Role, int], ...]
    """(child, kind, role, members); child UNPLACED for members left out."""
    master_child: int | None
    """Where the bundle's own pending master goes (None: no pending master)."""
    cost: int
    unplaced: int

    def placed_in(self) -> dict[int, int]:
        out: dict[int, int] = defaultdict(int)
        for child, _, _, n in self.counts:
            if child != UNPLACED:
                out[child] += n
        return out


@dataclass
class BundleType:
    index: int
    bundles: list[Bundle]
    patterns: list[Pattern]
    cluster: str
    pending_master: bool
    """Whether a placed bundle brings a new master (a labelled or chosen one)."""


@dataclass
class LevelSpec:
    level: Level
    children: list[Child]
    bundles: list[Bundle]
    fixed_masters: dict[str, Counter[int | None]]
    """Per Redis cluster: masters that stay, per child (None: outside the parent)."""
    fixed_outside_max: dict[str, int]
    """Per Redis cluster: the most masters that stay in one domain of this level that is not a
    child (a zone without room for new members, a rack of another zone)."""
    fixed_sub_masters: dict[str, int]
    """Per Redis cluster: the most masters that stay in one domain of the next level down."""
    masters_total: dict[str, int] | None
    """Per Redis cluster: its masters after this level, when already known (rack level)."""
    t_low: int
    partial: bool
    sub_level: Level | None
    strengths: dict[str, str]
    """Separation strength per level (rack, zone): required, preferred or ignore."""
    relaxed: frozenset[str] = frozenset()
    """Required levels turned into heavy penalties (relaxWhenInfeasible)."""
    master_sub_domains: tuple[int, ...] = ()
    """Per child: its domains one level down that can hold masters (those with room and those
    where masters stay). The fullest holds at least the child's masters over this many."""
    zone_members: dict[str, Counter[int | None]] = field(default_factory=dict)
    """Level one only: per Redis cluster, members that stay, per child (None: in a zone that
    is not a child), for memberSpread."""
    zone_members_outside: dict[str, int] = field(default_factory=dict)
    """Level one only: per Redis cluster, the most members that stay in one zone that is not
    a child."""
    sub_rooms: tuple[tuple[SubRoom, ...], ...] = ()
    """Per child: its domains one level down with their master room, when the bound on the
    fullest of them counts each one's room (a small rack cannot take its even share)."""


@dataclass
class LevelSolution:
    status: str
    """CP-SAT's status name."""
    assignment: dict[str, tuple[int, Role]]
    """Pod key -> (child index, role) for each placed pending member."""
    unplaced_shards: set[str]
    t: int
    objective: int
    bound: int
    big: int
    big_short: int
    proven: bool

    def lower_bounds(self) -> tuple[int, int, int]:
        """(unplaced pods, majority shortfall, soft cost): valid lower bounds, lexicographically
        (the soft bound holds for placements that meet the first two)."""
        return lexical_parts(self.bound, self.big, self.big_short)

    def soft_cost(self) -> int:
        """The soft cost of the level's answer, without its unplaced pods and shortfall."""
        return lexical_parts(self.objective, self.big, self.big_short)[2]


def lexical_parts(value: int, big: int, big_short: int) -> tuple[int, int, int]:
    """A level's weighted objective (or bound) read back as (unplaced pods, majority
    shortfall, soft cost): one unplaced pod weighs ``big``, one step of shortfall ``big_short``."""
    unplaced, rest = divmod(value, big)
    shortfall, soft = divmod(rest, big_short)
    return unplaced, shortfall, soft


# --------------------------------------------------------------------------- patterns
