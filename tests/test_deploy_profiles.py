"""deploy/profiles/NAME: the binder install in gate mode, the profile's policy, and the
MutatingAdmissionPolicy that gates the deployment's pods, all following models.identity.profiles.

The CEL expressions are read here, not evaluated: the e2e tests run them on a real API server.
"""

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from models.identity.profiles import PROFILES
from models.policy import Policy
from placer.binder.loop import PLACEMENT_GATE
from placer.inputs.files import read_policy
from tests.test_deploy import (
    DEPLOY,
    NAMESPACE,
    POLICY_PATH,
    Doc,
    binder_args,
    main,
    one,
    overlay,
    pod_template,
    render,
    restricted_violations,
)

PROFILE_DIR = DEPLOY / "profiles"
NAMES = sorted(PROFILES)
MAP = "MutatingAdmissionPolicy"
BINDING = "MutatingAdmissionPolicyBinding"
# admissionregistration.k8s.io/v1 MutatingAdmissionPolicy is GA from 1.36.
MAP_GA = (1, 36)

GATES_IN_CEL = re.compile(r'Object\.spec\.schedulingGates\{\s*name:\s*"([^"]*)"\s*\}')
SCHEDULER_IN_CEL = re.compile(r'schedulerName:\s*"([^"]*)"')


def profile(name: str) -> tuple[Doc, ...]:
    return render(f"profiles/{name}")


def expression(docs: tuple[Doc, ...]) -> str:
    (mutation,) = one(docs, MAP)["spec"]["mutations"]
    assert mutation["patchType"] == "ApplyConfiguration"
    text: str = mutation["applyConfiguration"]["expression"]
    return text


def profile_policy(name: str) -> Policy:
    return Policy.model_validate({"identity": {"profile": name}})


def gate_args(mode: str, *flags: str) -> list[str]:
    return [
        "redis-placer", "binder", "--enforce", mode, "--leader-elect",
        "-p", POLICY_PATH, "--metrics-port", "9090", *flags,
    ]  # fmt: skip


PROFILE_FLAGS = ("--manage-pdbs", "--guard")
"""What every profile adds to deploy/'s binder: a budget per shard, so a drain takes one member of
a shard at a time (deploy/components/manage-pdbs), and the maintenance guard, which hands a master
over before its pod goes (deploy/components/guard)."""


# -- one directory per profile ---------------------------------------------------------------


def test_every_profile_has_a_directory_and_every_directory_a_profile() -> None:
    directories = {p.name for p in PROFILE_DIR.iterdir() if p.is_dir()}
    assert directories == set(PROFILES)
    for name in directories:
        assert (PROFILE_DIR / name / "kustomization.yaml").is_file(), name


def _schema_versions() -> list[str]:
    """The first Kubernetes with the v1 MutatingAdmissionPolicy, and the newest shipped."""
    versions = sorted(
        {v for v in all_versions() if tuple(int(x) for x in v.split(".")[:2]) >= MAP_GA},
        key=lambda v: tuple(int(x) for x in v.split(".")),
    )
    assert versions, "kubernetes-validate ships no schema with the v1 MutatingAdmissionPolicy"
    return sorted({versions[0], versions[-1]})


@pytest.mark.parametrize("version", _schema_versions())
@pytest.mark.parametrize("name", NAMES)
def test_profile_renders_and_validates_strictly(name: str, version: str) -> None:
    for doc in profile(name):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} against {version}: {err.message}")


@pytest.mark.parametrize("name", NAMES)
def test_profile_is_the_install_plus_the_admission_policy(name: str) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in profile(name))
    pdbs = [(d["kind"], d["metadata"]["name"]) for d in render("components/manage-pdbs")]
    guard = [(d["kind"], d["metadata"]["name"]) for d in render("components/guard")]
    assert ("ValidatingWebhookConfiguration", "redis-placer-guard") in guard
    expected = sorted(
        [(d["kind"], d["metadata"]["name"]) for d in main()]
        + pdbs
        + guard
        + [(MAP, f"redis-placer-{name}"), (BINDING, f"redis-placer-{name}")]
    )
    assert kinds == expected
    for doc in profile(name):
        if doc["kind"] in (MAP, BINDING, "ValidatingWebhookConfiguration"):
            assert "namespace" not in doc["metadata"], "cluster-scoped"


@pytest.mark.parametrize("name", NAMES)
def test_profile_keeps_pod_security(name: str) -> None:
    """Its grants are checked with every other rendering's (tests/test_deploy.py)."""
    spec = pod_template(one(profile(name), "Deployment", "redis-placer-binder"))["spec"]
    assert restricted_violations(spec) == []


# -- the binder and its policy ---------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_profile_binder_runs_in_gate_mode(name: str) -> None:
    assert binder_args(main()) == gate_args("bind")  # deploy/ itself is unchanged
    assert binder_args(profile(name)) == gate_args("gate", *PROFILE_FLAGS)


@pytest.mark.parametrize("name", NAMES)
def test_profile_configmap_sets_the_profile(name: str, tmp_path: Path) -> None:
    configmap = one(profile(name), "ConfigMap", "redis-placer-policy")
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert list(configmap["data"]) == ["policy.yaml"]
    text = configmap["data"]["policy.yaml"]
    assert f"redis-placer policy --print-defaults --profile {name}" in text
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    policy = read_policy(str(path))
    assert policy.identity.profile == name
    assert policy == profile_policy(name)
    assert policy != Policy() or name == "labels"  # the profile filled something in
    spec = pod_template(one(profile(name), "Deployment", "redis-placer-binder"))["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["policy"]["configMap"]["name"] == configmap["metadata"]["name"]


# -- the MutatingAdmissionPolicy -------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_admission_policy_gates_the_profiles_pods_at_creation(name: str) -> None:
    docs = profile(name)
    policy_doc = one(docs, MAP)
    binding = one(docs, BINDING)
    assert binding["spec"]["policyName"] == policy_doc["metadata"]["name"]
    spec = policy_doc["spec"]
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert spec["matchConstraints"]["objectSelector"] == {
        "matchLabels": profile_policy(name).selector
    }
    assert spec["failurePolicy"] == "Fail"
    assert spec["reinvocationPolicy"] in ("Never", "IfNeeded")
    assert GATES_IN_CEL.findall(expression(docs)) == [PLACEMENT_GATE]
    assert not SCHEDULER_IN_CEL.search(expression(docs))
    # the namespaces of deploy/components/redis-namespaces (tests/test_deploy.py checks them)
    assert set(binding["spec"]["matchResources"]) == {"namespaceSelector"}
    assert "paramRef" not in binding["spec"] and "paramKind" not in spec


def test_gate_pattern_reads_the_gate_and_nothing_else() -> None:
    cel = 'Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: "a/b"}]}}'
    assert GATES_IN_CEL.findall(cel) == ["a/b"]
    assert GATES_IN_CEL.findall('Object{spec: Object.spec{schedulerName: "a/b"}}') == []


# -- bind mode -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_bind_mode_component_flips_binder_and_mutation(name: str) -> None:
    gated = profile(name)
    docs = overlay(f"profiles/{name}", "bind-mode")
    assert binder_args(docs) == gate_args("bind", *PROFILE_FLAGS)
    cel = expression(docs)
    assert SCHEDULER_IN_CEL.findall(cel) == [profile_policy(name).scheduler_name]
    assert GATES_IN_CEL.findall(cel) == [] and "schedulingGates" not in cel
    before, after = one(gated, MAP)["spec"], one(docs, MAP)["spec"]
    assert {k: v for k, v in after.items() if k != "mutations"} == {
        k: v for k, v in before.items() if k != "mutations"
    }
    assert one(docs, BINDING) == one(gated, BINDING)
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, _schema_versions()[-1], strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {err.message}")


def test_bind_mode_refuses_a_binder_that_is_not_in_gate_mode() -> None:
    """Listed before gate-mode (or without it) the component would leave the binder and the
    mutation disagreeing; its test op stops the build instead."""
    with pytest.raises(AssertionError):
        overlay(".", "bind-mode")
    assert binder_args(overlay(".", "gate-mode", "bind-mode")) == gate_args("bind")


def test_gate_mode_component_alone_switches_the_install() -> None:
    assert binder_args(overlay(".", "gate-mode")) == gate_args("gate")


@pytest.mark.parametrize("name", NAMES)
def test_kustomization_shows_how_to_use_bind_mode(name: str) -> None:
    directory = PROFILE_DIR / name
    text = (directory / "kustomization.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    assert doc["components"] == [
        "../../components/gate-mode",
        "../../components/manage-pdbs",
        "../../components/redis-namespaces",
        "../../components/guard",
    ]
    assert "../../components/bind-mode" in text  # in a comment
    # what the guard is and how to leave it out, beside it
    guard_comment = text.split("  - ../../components/guard")[0].rsplit("redis-namespaces\n", 1)[1]
    assert "maintenance guard" in guard_comment and "To leave it out" in guard_comment
    assert (directory / "../../components/bind-mode/kustomization.yaml").resolve().is_file()
    assert f"kubectl apply -k deploy/profiles/{name}" in text
