"""The install path of README.md and docs/install.md says what kustomize does: each overlay they
show renders as they say, and each name they delete is one the install creates. (The commands
themselves run for real in tests/test_image.py, tests/e2e/test_image_e2e.py and
tests/e2e/test_uninstall_e2e.py.)"""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.test_deploy import DEPLOY, Doc, binder_args, kustomize, one, pod_template, render

ROOT = DEPLOY.parent
README = ROOT / "README.md"
INSTALL = ROOT / "docs" / "install.md"
IMAGE = "registry.example.com/redis-placer:0.1.0"
HEREDOC = re.compile(r"cat > my-install/kustomization\.yaml <<'END'\n(.*?)^END$", re.M | re.S)
YAML_BLOCK = re.compile(r"^```yaml\n(# my-install/kustomization\.yaml\n.*?)^```", re.M | re.S)
DELETED = re.compile(r"kubectl delete mutatingadmissionpolicybinding,mutatingadmissionpolicy (\S+)")
GUARD_DELETED = re.compile(r"kubectl delete validatingwebhookconfiguration (\S+)")


def rendered_overlay(text: str, *extra: Path) -> tuple[Doc, ...]:
    """The overlay as my-install/ in the checkout would render (its ../deploy made to point
    at this checkout's deploy/ from a folder elsewhere), with ``extra`` files beside it."""
    with tempfile.TemporaryDirectory(prefix="my-install-") as folder:
        where = Path(folder)
        deploy = os.path.relpath(DEPLOY, where)
        (where / "kustomization.yaml").write_text(text.replace("../deploy", deploy))
        for path in extra:
            shutil.copy(path, where / path.name)
        return kustomize(where)


def images(docs: tuple[Doc, ...]) -> list[str]:
    return [
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "CronJob")
        for c in pod_template(d)["spec"]["containers"]
    ]


def test_the_readme_overlay_installs_the_profile_with_your_image() -> None:
    (text,) = HEREDOC.findall(README.read_text())
    docs = rendered_overlay(text)
    assert images(docs) == [IMAGE, IMAGE]
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted((d["kind"], d["metadata"]["name"]) for d in render("profiles/bitnami"))


def overlays() -> list[str]:
    return YAML_BLOCK.findall(INSTALL.read_text())


def test_the_install_pages_overlays_render_as_it_says() -> None:
    profile, older = overlays()
    docs = rendered_overlay(profile)
    assert images(docs) == [IMAGE, IMAGE]
    shown = re.search(
        r"\$ kubectl kustomize my-install/ \| grep image:\n(.*?)```", INSTALL.read_text(), re.S
    )
    assert shown is not None
    assert [line.strip() for line in shown.group(1).splitlines()] == [f"image: {IMAGE}"] * 2

    # Before 1.36: the profile's policy, gate mode, no admission policy.
    policy = DEPLOY / "profiles" / "bitnami" / "policy.yaml"
    docs = rendered_overlay(older, policy)
    assert not [d for d in docs if d["kind"].startswith("MutatingAdmissionPolicy")]
    assert binder_args(docs)[2:4] == ["--enforce", "gate"]
    configmap = one(docs, "ConfigMap", "redis-placer-policy")
    assert configmap["data"]["policy.yaml"] == policy.read_text()
    assert images(docs) == [IMAGE, IMAGE]


@pytest.mark.parametrize("page", [README, INSTALL], ids=lambda p: p.name)
def test_the_uninstall_deletes_the_admission_policy_the_profile_creates(page: Path) -> None:
    (name,) = set(DELETED.findall(page.read_text()))
    profile = name.removeprefix("redis-placer-")
    docs = render(f"profiles/{profile}")
    for kind in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"):
        assert one(docs, kind)["metadata"]["name"] == name
    assert f"release-gates -p deploy/profiles/{profile}/policy.yaml" in page.read_text()


@pytest.mark.parametrize("page", [README, INSTALL], ids=lambda p: p.name)
def test_the_uninstall_deletes_the_guards_webhook_configuration_first(page: Path) -> None:
    text = page.read_text()
    block = re.search(r"```bash\n([^`]*release-gates -p [^`]*)```", text)
    assert block is not None
    steps = [line for line in block.group(1).splitlines() if line.startswith(("kubectl", "redis"))]
    (name,) = GUARD_DELETED.findall(steps[0])
    docs = render("profiles/bitnami")
    assert one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"] == name
    assert "failurePolicy: Ignore" in text  # why a leftover never blocks


def test_build_sh_keeps_stdout_for_the_image_name() -> None:
    """Its argument handling, without building: a bad argument is an error on stderr."""
    script = DEPLOY / "image" / "build.sh"
    bad = subprocess.run([script, "--bogus"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == "build.sh: unknown argument --bogus (see --help)"
    usage = subprocess.run([script, "--help"], capture_output=True, text=True, check=False)
    assert usage.returncode == 0 and "--tag NAME" in usage.stderr and usage.stdout == ""
