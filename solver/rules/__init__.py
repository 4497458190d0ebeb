"""The rule registry, in the spirit of kube-scheduler plugins: a new rule is one new unit here."""

from solver.rules import (
    fits,
    load_balance,
    master_balance,
    master_exclusivity,
    member_spread,
    replica_separation,
    shard_spread,
    stability,
    superseded,
    survive,
)
from solver.rules.base import Rule

RULES: tuple[Rule, ...] = (
    fits.RULE,
    shard_spread.RULE,
    master_exclusivity.RULE,
    replica_separation.RACK,
    replica_separation.ZONE,
    survive.RULE,
    master_balance.RULE,
    member_spread.RULE,
    superseded.RULE,
    load_balance.RULE,
    stability.RULE,
)

__all__ = ["RULES", "Rule"]
