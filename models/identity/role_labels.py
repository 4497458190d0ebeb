"""The values a deployment writes in its role label (the OT operator's ``slave``), so a pod
relabelled after a failover reads like its siblings."""

from collections import Counter

from models.identity.facts import role_of
from models.policy import Policy
from models.snapshot import Snapshot


def role_label_values(snapshot: Snapshot, policy: Policy) -> dict[str, str]:
    """Role -> the label value most of its pods carry now."""
    key = policy.labels.role
    seen: dict[str, Counter[str]] = {}
    for member in snapshot.members:
        value = member.pod.labels.get(key)
        role = role_of(value, policy.identity.role_values)
        if value is not None and role is not None:
            seen.setdefault(role.value, Counter())[value] += 1
    return {role: values.most_common(1)[0][0] for role, values in seen.items()}
