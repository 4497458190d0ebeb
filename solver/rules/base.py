"""A placement rule: one name, its CP-SAT encoding, and its independent check, side by side."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from models.plan import Plan, Violation
from models.policy import Policy
from models.snapshot import Snapshot
from solver.classes.cpmodel import PlacementModel

Encode = Callable[[PlacementModel], None]
Check = Callable[[Snapshot, Policy, Plan], list[Violation]]


@dataclass(frozen=True)
class Rule:
    name: str
    kind: Literal["hard", "soft", "per-level", "opt-in"]
    doc: str
    encode: Encode
    check: Check


def violations_of(rule: str) -> Check:
    """The independent checker's verdict for one rule (solver/check.py shares no code with encode)."""

    def check(snapshot: Snapshot, policy: Policy, plan: Plan) -> list[Violation]:
        from solver.check import check_plan

        return [v for v in check_plan(snapshot, policy, plan) if v.rule == rule]

    return check
