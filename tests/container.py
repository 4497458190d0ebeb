"""The image, built by deploy/image/build.sh with buildah and run as a pod's container runs.

A run starts the image's entrypoint (or another command) as uid and gid 10001, on the image's
root filesystem mounted read-only, with a fresh tmpfs on /tmp (the manifests' emptyDir), and
host files mounted read-only where a pod gets them (the policy ConfigMap, the service-account
token): in its own mount namespace, chrooted, with the image's environment and working
directory. Processes run as root here, like a container runtime (a mount namespace and chroot).

The image is built once per test session, into container storage of its own under
``$REDIS_PLACER_IMAGE_STORAGE`` (default ``/tmp/redis-placer-image-storage``), kept between
sessions so that a rebuild reuses the Debian base and the dependency layer. Building takes
minutes: the tests that use it run only with ``REDIS_PLACER_IMAGE_TESTS=1``, and skip with the
reason where buildah, mmdebstrap or unshare is missing or unusable.
"""

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "deploy" / "image" / "build.sh"
OPT_IN = "REDIS_PLACER_IMAGE_TESTS"
STORAGE_ENV = "REDIS_PLACER_IMAGE_STORAGE"
TAG = "localhost/redis-placer:image-test"
USER = "10001:10001"
TOOLS = ("buildah", "mmdebstrap", "unshare", "chroot", "mount")

# Run in a new mount namespace (unshare), as a pod's container: $1 the image's root, then
# SOURCE TARGET pairs of read-only mounts up to "--", then the command to exec.
RUNNER = r"""
set -eu
root=$1; shift
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777,size=64m tmpfs "$root/tmp"
while [ "$1" != "--" ]; do
  case "$(realpath -m "$root$2")" in "$root"/*) ;; *) echo "mount $2 leaves the image" >&2; exit 3 ;; esac
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mount -o remount,bind,ro "$root$2"
  shift 2
done
shift
mount -o remount,bind,ro "$root"
exec "$@"
"""


def storage_dir() -> Path:
    return Path(os.environ.get(STORAGE_ENV) or "/tmp/redis-placer-image-storage")


def buildah_env() -> dict[str, str]:
    """buildah's own settings, pointed at this storage (vfs: no overlay mounts needed)."""
    storage = storage_dir()
    conf = storage / "storage.conf"
    if not conf.exists():
        storage.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            "[storage]\n"
            'driver = "vfs"\n'
            f'runroot = "{storage / "run"}"\n'
            f'graphroot = "{storage / "root"}"\n'
        )
    # chroot isolation: no OCI runtime needed (buildah's default, oci, runs one in the build)
    isolation = os.environ.get("BUILDAH_ISOLATION") or "chroot"
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf), "BUILDAH_ISOLATION": isolation}


def unusable() -> str | None:
    """Why the image cannot be built and run here, or None."""
    if os.environ.get(OPT_IN) != "1":
        return f"building and running the image takes minutes: set {OPT_IN}=1 to run it"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install buildah mmdebstrap)"
    if os.geteuid() != 0:
        return "running the image needs root here (a mount namespace and chroot, as a runtime's)"
    info = subprocess.run(
        ["buildah", "info"], env=buildah_env(), capture_output=True, text=True, check=False
    )
    if info.returncode != 0:
        first = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"buildah is unusable here: {first}"
    return None


@dataclass(frozen=True)
class Image:
    name: str
    container: str
    root: Path
    """The image's files (a buildah working container's mount), run read-only."""
    config: dict[str, Any]
    """The image's OCI configuration: Entrypoint, Cmd, Env, User, WorkingDir."""
    build_seconds: float
    size: str

    @property
    def env(self) -> dict[str, str]:
        pairs = (entry.split("=", 1) for entry in self.config.get("Env") or [])
        return {key: value for key, value in pairs}


def _buildah(*args: str) -> str:
    out = subprocess.run(
        ["buildah", *args], env=buildah_env(), capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def build() -> Image:
    """deploy/image/build.sh as a user runs it; its last line is the image's name."""
    started = time.monotonic()
    out = subprocess.run(
        ["nice", str(BUILD_SCRIPT), "--tag", TAG],
        env=buildah_env(),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    seconds = time.monotonic() - started
    if out.returncode != 0:
        raise RuntimeError(f"build.sh exited {out.returncode}:\n{out.stderr[-4000:]}")
    name = out.stdout.strip().splitlines()[-1]
    assert name == TAG, out.stdout
    config = json.loads(_buildah("inspect", "--type", "image", name))["OCIv1"]["config"]
    size = _buildah("images", "--format", "{{.Size}}", name).strip().splitlines()[0]
    container = _buildah("from", "--pull-never", name).strip()
    root = Path(_buildah("mount", container).strip())
    return Image(name, container, root, config, seconds, size)


def remove(image: Image) -> None:
    """The working container goes, and the layers no tag holds (with vfs each is a whole copy
    of the files: a few GB a build); the image and the Debian base stay."""
    for args in (("umount", image.container), ("rm", image.container), ("rmi", "--prune")):
        subprocess.run(["buildah", *args], env=buildah_env(), capture_output=True, check=False)


def inside(root: Path, path: str) -> str:
    """``path`` as the image sees it, resolved to where it is under ``root``: its symbolic
    links (e.g. Debian's /var/run -> /run) followed within the image, never out to the host."""
    resolved = Path("/")
    parts = list(Path(path).parts[1:])
    hops = 0
    while parts:
        part = parts.pop(0)
        candidate = resolved / part
        host = root / candidate.relative_to("/")
        if host.is_symlink():
            hops += 1
            assert hops < 40, f"{path}: too many symbolic links in the image"
            target = Path(os.readlink(host))
            parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
            resolved = Path("/") if target.is_absolute() else resolved
        elif part == "..":
            resolved = resolved.parent
        else:
            resolved = candidate
    return str(resolved)


def command_line(
    image: Image,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    mounts: Mapping[str, Path] | None = None,
    entrypoint: Sequence[str] | None = None,
    user: str = USER,
) -> list[str]:
    """The host command that runs ``entrypoint + args`` in the image as a pod would."""
    environment = {**image.env, **(env or {})}
    workdir = image.config.get("WorkingDir") or "/"
    command = list(entrypoint if entrypoint is not None else image.config.get("Entrypoint") or [])
    pairs = [
        part
        for target, source in (mounts or {}).items()
        for part in (str(source), inside(image.root, target))
    ]
    return [
        "unshare", "--mount", "--propagation", "private", "--fork", "--kill-child=SIGKILL",
        "bash", "-c", RUNNER, "runner", str(image.root), *pairs, "--",
        "env", "-i", *(f"{k}={v}" for k, v in environment.items()),
        "chroot", f"--userspec={user}", f"--groups={user.split(':')[1]}", str(image.root),
        "env", f"--chdir={workdir}", *command, *args,
    ]  # fmt: skip


def run(image: Image, args: Sequence[str], timeout: float = 300, **kw: Any) -> "Run":
    started = time.monotonic()
    out = subprocess.run(
        command_line(image, args, **kw), capture_output=True, text=True, timeout=timeout
    )
    return Run(out.returncode, out.stdout, out.stderr, time.monotonic() - started)


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float

    def __str__(self) -> str:
        return f"exit {self.code} after {self.seconds:.1f}s\n{self.stdout}\n{self.stderr}"


def start(image: Image, args: Sequence[str], log: Path, **kw: Any) -> subprocess.Popen[bytes]:
    """A long-running command (the binder), its output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            command_line(image, args, **kw), stdout=out, stderr=subprocess.STDOUT
        )


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM to the command itself (unshare's child, as a kubelet stops a container), then
    its exit code; SIGKILL after ``timeout``."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    with_pids = children.read_text().split() if children.exists() else []
    for pid in with_pids:
        os.kill(int(pid), signal.SIGTERM)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=timeout)
