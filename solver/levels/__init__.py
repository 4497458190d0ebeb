"""Place mode by levels of the topology tree: zones, then racks inside each zone, then nodes.

rooms.py     what every node can still take, and tables of it per utilisation ceiling
shapes.py    pending shards grouped by shape (interchangeable for every rule)
spec.py      what one level is asked (child domains, bundles) and what it answers
patterns.py  the rules' faces at a level: which patterns a bundle may take, at what cost
model.py     one level as a CP-SAT model: bundles counted per pattern
zones.py     level one, over the whole batch: its optimum is the plan's bound
racks.py     level two, one zone at a time
nodes.py     level three, one rack at a time: a packing
topdown.py   the three in order
"""
