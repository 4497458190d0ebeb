"""``redis-placer release-gates``: the last step of an uninstall, so that no Redis pod waits for
a binder that is gone.

A pod created behind redis-placer's scheduling gate waits until the binder lifts it; without
the binder it waits for ever. This command lifts that one gate from every managed pod still
waiting, and leaves everything else as it is: a pod's other gates, its spec, and every pod
that is bound already (a pod with a node has no gate to lift). kube-scheduler then places the
released pods. It refuses while a MutatingAdmissionPolicy would still gate new pods, since
those would be stuck again the moment after: remove the policy first. It also says when the
maintenance guard's webhook configuration is still there: that never blocks (failurePolicy
Ignore), but with the binder gone each eviction and delete of a Redis pod waits for its failed
call, so it goes first of all.
"""

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from models.errors import InputError
from models.policy import Policy
from placer.binder.config import PLACEMENT_GATE
from placer.commands.options import (
    EXIT_OK,
    EXIT_VIOLATIONS,
    context_option,
    fail,
    kubeconfig_option,
)
from placer.inputs.files import read_policy
from placer.inputs.live import LIVE_ONLY, connect
from placer.kube.objects import gate_names, pod_key
from placer.output.render import document

if TYPE_CHECKING:  # the Kubernetes client is imported once a cluster is read
    from placer.kube.adapter import KubeAdapter

ATTEMPTS = 3  # a pod that changed under us is read again, at most this often
GUARD_WEBHOOK = "redis-placer-guard"  # deploy/components/guard


@dataclass
class Waiting:
    """The unbound pods that wait for redis-placer, sorted by what can be done for them."""

    gated: list[dict[str, Any]] = field(default_factory=list)
    """Managed, carrying the gate: released by removing it."""
    scheduled_by_binder: list[dict[str, Any]] = field(default_factory=list)
    """Managed, in bind mode (schedulerName is the binder's, which cannot change on a pod)."""
    gated_unmanaged: list[dict[str, Any]] = field(default_factory=list)
    """Carrying the gate but not selected by the policy: another policy's pods, left alone."""


def waiting_pods(pods: Iterable[Mapping[str, Any]], policy: Policy) -> Waiting:
    """Sort the pods that wait for redis-placer; bound pods and everyone else's are not listed."""
    found = Waiting()
    for pod in pods:
        spec = pod.get("spec") or {}
        meta = pod.get("metadata") or {}
        if spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue  # bound (running or starting), or going: nothing waits
        managed = policy.selects(meta.get("labels") or {})
        if PLACEMENT_GATE in gate_names(pod):
            (found.gated if managed else found.gated_unmanaged).append(dict(pod))
        elif managed and spec.get("schedulerName") == policy.scheduler_name:
            found.scheduled_by_binder.append(dict(pod))
    for pods_of_a_kind in (found.gated, found.scheduled_by_binder, found.gated_unmanaged):
        pods_of_a_kind.sort(key=pod_key)
    return found


def gating_policies(policies: Sequence[Mapping[str, Any]], policy: Policy) -> list[str]:
    """Names of the MutatingAdmissionPolicies whose mutations add redis-placer's gate, or set
    the binder's schedulerName (bind mode), to the pods they match."""
    marks = (f'"{PLACEMENT_GATE}"', f'"{policy.scheduler_name}"')
    names = []
    for doc in policies:
        for mutation in (doc.get("spec") or {}).get("mutations") or []:
            expression = str((mutation.get("applyConfiguration") or {}).get("expression", ""))
            expression += str((mutation.get("jsonPatch") or {}).get("expression", ""))
            if any(mark in expression for mark in marks):
                names.append(str((doc.get("metadata") or {}).get("name")))
                break
    return sorted(names)


def guard_left(adapter: "KubeAdapter") -> bool:
    """Whether the maintenance guard's ValidatingWebhookConfiguration is still installed (False
    when it cannot be read: the note is a courtesy, not a condition)."""
    from placer.kube.adapter import KubeApiError

    try:
        return adapter.get_webhook_configuration(GUARD_WEBHOOK) is not None
    except KubeApiError:
        return False


def release(adapter: "KubeAdapter", pod: Mapping[str, Any]) -> str:
    """Lift the gate from one pod; the pod read again if it changed meanwhile. '' when done,
    else why not."""
    from placer.kube.adapter import PatchOutcome

    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    current: Mapping[str, Any] | None = pod
    for _ in range(ATTEMPTS):
        if current is None:
            return "gone"
        if (current.get("spec") or {}).get("nodeName"):
            return "bound meanwhile"
        result = adapter.remove_gate(namespace, name, PLACEMENT_GATE, current)
        if result.outcome in (PatchOutcome.PATCHED, PatchOutcome.NOT_GATED):
            return ""  # lifted now, or by someone else (the binder) before us
        if result.outcome is PatchOutcome.GONE:
            return "gone"
        if result.outcome is not PatchOutcome.CONFLICT:
            return f"HTTP {result.status}: {result.message}"
        current = adapter.get_pod(namespace, name)
    return f"it kept changing ({ATTEMPTS} tries)"


@click.command(
    "release-gates",
    short_help="Uninstalling: lift redis-placer's gate from pods still waiting.",
)
@click.option(
    "-p",
    "--policy",
    "policy_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The policy the binder ran with: its selector says which pods are redis-placer's "
    "(defaults serve without one; a profile's: deploy/profiles/NAME/policy.yaml).",
)
@click.option("-n", "--namespace", default=None, help="One namespace only (default: all).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="List the managed pods waiting for redis-placer (those it would release); change none.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Release even while a MutatingAdmissionPolicy still gates new pods.",
)
@context_option
@kubeconfig_option
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help="table: a line per pod, then the count; json or yaml: the same as a document.",
)
def command(
    policy_path: str | None,
    namespace: str | None,
    dry_run: bool,
    force: bool,
    context: str | None,
    kubeconfig: str | None,
    output: str,
) -> None:
    """Lift redis-placer's scheduling gate from managed pods still waiting for the binder.

    kube-scheduler then places them: the last step of an uninstall, after the admission policy
    and the binder are gone.

    Only the gate redis-placer.io/placement is removed, and only from unbound pods the policy's
    selector manages; their other gates, and every bound pod, are left as they are. Pods of
    bind mode (schedulerName of the policy, which a pod cannot change) are listed, to be
    deleted for their controller to recreate them. Exit 0 when no managed pod is left waiting,
    1 otherwise.
    """
    policy = read_policy(policy_path)
    adapter = connect(kubeconfig, context, instead=LIVE_ONLY)
    from placer.kube.adapter import KubeApiError

    try:
        still_gating = gating_policies(adapter.list_admission_policies(), policy)
        pods = adapter.list_pods(namespace=namespace)
    except KubeApiError as exc:
        raise InputError(f"cannot read the cluster: {exc}") from None
    if guard_left(adapter):
        click.echo(
            f"note: ValidatingWebhookConfiguration {GUARD_WEBHOOK} is still installed; it never "
            "blocks (failurePolicy Ignore), but without the binder each eviction and delete of a "
            "Redis pod waits for its failed call: delete it first (kubectl delete "
            f"validatingwebhookconfiguration {GUARD_WEBHOOK})",
            err=True,
        )
    if still_gating:
        names = ",".join(still_gating)
        remedy = (
            f"MutatingAdmissionPolicy {names} still gates new pods, which would wait again: "
            f"delete it first (kubectl delete mutatingadmissionpolicybinding,"
            f"mutatingadmissionpolicy {' '.join(still_gating)})"
        )
        if dry_run:
            click.echo(f"note: {remedy}", err=True)
        elif not force:
            fail(f"{remedy}, or pass --force")
    found = waiting_pods(pods, policy)
    table = output == "table"
    report: dict[str, Any] = {
        "dryRun": dry_run,
        "released": [],
        "wouldRelease": [],
        "notReleased": [],
        "bindMode": [],
    }
    for pod in found.gated:
        if dry_run:
            report["wouldRelease"].append(pod_key(pod))
            if table:
                click.echo(f"would release {pod_key(pod)}")
            continue
        why_not = release(adapter, pod)
        if why_not in ("", "gone", "bound meanwhile"):
            report["released"].append({"pod": pod_key(pod), "note": why_not})
            if table:
                click.echo(f"released {pod_key(pod)}" + (f" ({why_not})" if why_not else ""))
        else:
            report["notReleased"].append({"pod": pod_key(pod), "reason": why_not})
            if table:
                click.echo(f"not released {pod_key(pod)}: {why_not}")
    for pod in found.scheduled_by_binder:
        ns, name = pod_key(pod).split("/", 1)
        report["bindMode"].append(pod_key(pod))
        if table:
            click.echo(
                f"waiting {pod_key(pod)}: its schedulerName {policy.scheduler_name} (bind mode) "
                f"cannot change; delete it for its controller to recreate it: "
                f"kubectl -n {ns} delete pod {name}"
            )
    for pod in found.gated_unmanaged:
        click.echo(
            f"warning: {pod_key(pod)} carries {PLACEMENT_GATE} but the policy's selector does not "
            "select it; left as it is (pass the policy that manages it with -p)",
            err=True,
        )
    released = len(report["released"])
    left = len(report["wouldRelease"]) + len(report["notReleased"]) + len(report["bindMode"])
    report["leftWaiting"] = left
    if table:
        click.echo(f"released {released} pod(s); {left} managed pod(s) left waiting")
    else:
        click.echo(document(report, output), nl=output == "json")
    sys.exit(EXIT_VIOLATIONS if left else EXIT_OK)
