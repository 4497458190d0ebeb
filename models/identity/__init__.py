"""Identity: which Redis cluster, shard and role a pod is, and how many members its shard has.

The one place that knows how deployments label and form their pods (``profiles``); every
command reads pods through ``identify`` and never looks at a profile. After formation, Redis
itself is the truth (``--roles redis``), and so is a role label an operator writes
(``labels.role``): both come before the formation's guess.
"""
