"""One module per formation: how a deployment's pods map to shards and roles at creation.

Each ``read`` takes every selected pod of the snapshot at once (some formations count the
leaders or the highest member number of a whole cluster) and answers per pod.
"""
