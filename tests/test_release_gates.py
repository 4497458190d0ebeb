"""`redis-placer release-gates`: only redis-placer's gate, only on managed unbound pods, and
never while an admission policy would gate new pods again (the fake adapter; the real API
server in tests/e2e/test_uninstall_e2e.py)."""

import copy
from typing import Any

import pytest
from click.testing import CliRunner

from models.policy import Policy
from placer.binder.config import PLACEMENT_GATE
from placer.cli import main
from placer.commands.release_gates import gating_policies, release, waiting_pods
from placer.kube.adapter import PatchOutcome, PatchResult
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node, other_pod, redis_pod

OTHER_GATE = "example.com/quota"


def gated(name: str, *gates: str, **extra: Any) -> dict[str, Any]:
    pod = redis_pod(name, "redis", 0, None, namespace="redis", **extra)
    pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return pod


def cluster() -> FakeKubeAdapter:
    running = redis_pod("running", "redis", 0, "master", node="n1", namespace="redis")
    return FakeKubeAdapter(
        nodes=[node("n1", "zone-a", "rack-a")],
        pods=[
            running,
            gated("ours", PLACEMENT_GATE),
            gated("ours-and-theirs", OTHER_GATE, PLACEMENT_GATE),
            gated("theirs", OTHER_GATE),
            gated("elsewhere", PLACEMENT_GATE, labels={"app": "memcached"}),
            redis_pod(
                "bind-mode", "redis", 1, None, namespace="redis", schedulerName="redis-placer"
            ),
            other_pod("web", "n1", "100m", "64Mi"),
        ],
    )


def run(fake: FakeKubeAdapter, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    monkeypatch.setattr("placer.commands.release_gates.connect", lambda *_, **__: fake)
    return CliRunner().invoke(main, ["release-gates", *args])


def gates_of(fake: FakeKubeAdapter, name: str) -> list[str]:
    return [g["name"] for g in fake.pods[("redis", name)]["spec"].get("schedulingGates") or []]


def test_sorts_the_waiting_pods() -> None:
    found = waiting_pods(cluster().list_pods(), Policy())
    assert [p["metadata"]["name"] for p in found.gated] == ["ours", "ours-and-theirs"]
    assert [p["metadata"]["name"] for p in found.scheduled_by_binder] == ["bind-mode"]
    assert [p["metadata"]["name"] for p in found.gated_unmanaged] == ["elsewhere"]


def test_lifts_only_its_gate_from_managed_pods_and_touches_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = cluster()
    before = copy.deepcopy(fake.pods)
    result = run(fake, monkeypatch)
    assert gates_of(fake, "ours") == []
    assert gates_of(fake, "ours-and-theirs") == [OTHER_GATE]
    for untouched in ("running", "theirs", "elsewhere", "bind-mode"):
        assert fake.pods[("redis", untouched)] == before[("redis", untouched)], untouched
    assert fake.pods[("other", "web")] == before[("other", "web")]
    lines = result.output.splitlines()
    assert "released redis/ours" in lines and "released redis/ours-and-theirs" in lines
    assert any(
        line.startswith("waiting redis/bind-mode:")
        and "kubectl -n redis delete pod bind-mode" in line
        for line in lines
    )
    assert "redis/elsewhere carries" in result.stderr
    assert lines[-1] == "released 2 pod(s); 1 managed pod(s) left waiting"
    assert result.exit_code == 1  # the bind-mode pod still waits


def test_nothing_waiting_exits_0_and_a_dry_run_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = cluster()
    for name in ("bind-mode",):
        fake.delete_pod("redis", name)
    before = copy.deepcopy(fake.pods)
    dry = run(fake, monkeypatch, "--dry-run")
    assert fake.pods == before
    assert "would release redis/ours" in dry.output and dry.exit_code == 1
    done = run(fake, monkeypatch)
    assert done.exit_code == 0, done.output
    again = run(fake, monkeypatch)
    assert again.output.splitlines()[-1] == "released 0 pod(s); 0 managed pod(s) left waiting"
    assert again.exit_code == 0


def test_a_profiles_policy_selects_its_pods(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    fake = cluster()
    path = tmp_path / "policy.yaml"
    path.write_text("identity: {profile: bitnami}\n")
    result = run(fake, monkeypatch, "-p", str(path))
    # no pod here carries bitnami's labels: the default-labelled ones are someone else's
    assert gates_of(fake, "ours") == [PLACEMENT_GATE]
    assert result.output.splitlines()[-1] == "released 0 pod(s); 0 managed pod(s) left waiting"
    assert "redis/ours carries" in result.stderr


def admission_policy(expression: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "redis-placer-labels"},
        "spec": {
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": expression},
                }
            ]
        },
    }


GATE_CEL = (
    'Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: "'
    + PLACEMENT_GATE
    + '"}]}}'
)


def test_refuses_while_an_admission_policy_still_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = cluster()
    fake.admission_policies = [admission_policy(GATE_CEL)]
    result = run(fake, monkeypatch)
    assert result.exit_code == 2
    assert "MutatingAdmissionPolicy redis-placer-labels still gates new pods" in result.stderr
    assert gates_of(fake, "ours") == [PLACEMENT_GATE]
    listed = run(fake, monkeypatch, "--dry-run")  # only lists: a check, even while installed
    assert (
        "would release redis/ours" in listed.output and "note: MutatingAdmission" in listed.stderr
    )
    assert gates_of(fake, "ours") == [PLACEMENT_GATE]
    forced = run(fake, monkeypatch, "--force")
    assert gates_of(fake, "ours") == [] and forced.exit_code == 1


def test_gating_policies_reads_the_gate_and_bind_modes_scheduler_name() -> None:
    bind = admission_policy('Object{spec: Object.spec{schedulerName: "redis-placer"}}')
    other = admission_policy('Object{spec: Object.spec{schedulerName: "volcano"}}')
    assert gating_policies([admission_policy(GATE_CEL)], Policy()) == ["redis-placer-labels"]
    assert gating_policies([bind], Policy()) == ["redis-placer-labels"]
    assert gating_policies([other], Policy()) == []


def test_a_pod_changed_meanwhile_is_read_again() -> None:
    fake = cluster()
    stale = fake.get_pod("redis", "ours")
    assert stale is not None
    fake.patch_pod_labels("redis", "ours", {"touched": "yes"})  # a new resourceVersion
    assert release(fake, stale) == ""
    assert gates_of(fake, "ours") == []
    assert fake.pods[("redis", "ours")]["metadata"]["labels"]["touched"] == "yes"


def test_gives_up_on_a_pod_that_keeps_changing() -> None:
    fake = cluster()
    conflict = PatchResult(PatchOutcome.CONFLICT, 409, "the object has been modified")
    fake.remove_gate = lambda *_: conflict  # type: ignore[method-assign]
    pod = fake.get_pod("redis", "ours")
    assert pod is not None
    assert release(fake, pod) == "it kept changing (3 tries)"


def test_notes_a_guard_webhook_left_installed_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = cluster()
    fake.webhook_configurations["redis-placer-guard"] = {"metadata": {"name": "redis-placer-guard"}}
    result = run(fake, monkeypatch)
    assert "note: ValidatingWebhookConfiguration redis-placer-guard is still installed" in (
        result.stderr
    )
    assert "kubectl delete validatingwebhookconfiguration redis-placer-guard" in result.stderr
    assert gates_of(fake, "ours") == []  # it never blocks, so neither does the note
    del fake.webhook_configurations["redis-placer-guard"]
    again = run(fake, monkeypatch)
    assert "redis-placer-guard" not in again.stderr
