"""The binder's pod tally: a count kept from the cache's change feed equals a count of every pod."""

import random
from collections.abc import Mapping
from typing import Any

from placer.binder.cache import ClusterCache
from placer.binder.tally import PodTally
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node, redis_pod


def _pending(pod: Mapping[str, Any]) -> bool:
    return not (pod.get("spec") or {}).get("nodeName")


def _full_count(cache: ClusterCache) -> int:
    return sum(1 for pod in cache.objects()[1] if _pending(pod))


def test_the_tally_follows_additions_bindings_assumptions_deletions_and_relists() -> None:
    rng = random.Random(7)
    fake = FakeKubeAdapter(nodes=[node(f"n{i}", "a", "r1") for i in range(4)], pods=[])
    cache = ClusterCache(fake)
    cache.resync()
    tally = PodTally(cache, _pending)
    assert tally.count() == 0
    names: list[str] = []
    for step in range(300):
        action = rng.choice(["add", "add", "bind", "assume", "forget", "delete", "relist"])
        unbound = [n for n in names if _pending(cache.pods.get(("default", n), {}))]
        if action == "add" or not names:
            name = f"r-{step}"
            fake.add_pod(redis_pod(name, "c", step % 5, None))
            names.append(name)
        elif action == "bind" and unbound:
            fake.bind_pod("default", rng.choice(unbound), None, f"n{rng.randrange(4)}")
        elif action == "assume" and unbound:
            cache.note_bound(("default", rng.choice(unbound)), "n0")
        elif action == "forget":
            cache.forget_assumed(("default", rng.choice(names)))
        elif action == "delete":
            name = names.pop(rng.randrange(len(names)))
            fake.delete_pod("default", name)
        elif action == "relist":
            cache.resync()
        cache.poll(0)
        assert tally.count() == _full_count(cache), (step, action)
    assert 0 < _full_count(cache) < len(cache.pods)  # both kinds were there at the end


def test_the_tally_tests_only_the_pods_that_changed() -> None:
    fake = FakeKubeAdapter(
        nodes=[node("n0", "a", "r1")], pods=[redis_pod(f"r-{i}", "c", i, None) for i in range(50)]
    )
    cache = ClusterCache(fake)
    cache.resync()
    tested: list[str] = []

    def counts(pod: Mapping[str, Any]) -> bool:
        tested.append(pod["metadata"]["name"])
        return _pending(pod)

    tally = PodTally(cache, counts)
    assert tally.count() == 50 and len(tested) == 50  # the first count reads every pod
    tested.clear()
    assert tally.count() == 50 and tested == []
    fake.bind_pod("default", "r-3", None, "n0")
    fake.add_pod(redis_pod("r-new", "c", 99, None))
    cache.poll(0)
    assert tally.count() == 50
    assert sorted(tested) == ["r-3", "r-new"]
