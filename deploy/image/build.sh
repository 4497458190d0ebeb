#!/usr/bin/env bash
# Build the redis-placer image from this checkout with buildah where it is installed, else
# docker. The image's name is the last line printed (and the only line on stdout), so
#   IMAGE=$(deploy/image/build.sh --tag registry.example.com/redis-placer:0.1.0)
# gives the name to push. Everything else goes to stderr.
#
#   --tag NAME        the image's name (default localhost/redis-placer:VERSION, VERSION from
#                     pyproject.toml); env IMAGE
#   --base BASE       python:3.11-slim (pulled from its registry), or debian: a Debian 12 base
#                     made here by mmdebstrap from Debian's packages, no container registry
#                     needed. Default: debian with buildah when mmdebstrap is installed, else
#                     python:3.11-slim; env BASE
#   --refresh-base    make the debian base again (it is kept as localhost/redis-placer-base:
#                     bookworm and reused otherwise, so a rebuild skips mmdebstrap)
#   --engine ENGINE   buildah or docker (default: buildah if installed, else docker); env ENGINE
#   --ca-file FILE    certificate authorities for pip inside the build, e.g. those of a proxy
#                     that re-signs TLS (default: $PIP_CERT, when it names a file); env CA_FILE
#
# buildah reads its usual settings from the environment: STORAGE_DRIVER (e.g. vfs where
# overlay mounts are not allowed), CONTAINERS_STORAGE_CONF (where images are kept) and
# BUILDAH_ISOLATION (chroot is chosen here when neither runc nor crun is installed).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -n 1)"
IMAGE="${IMAGE:-localhost/redis-placer:${VERSION}}"
BASE="${BASE:-}"
ENGINE="${ENGINE:-}"
CA_FILE="${CA_FILE:-${PIP_CERT:-}}"
DEBIAN_BASE="localhost/redis-placer-base:bookworm"
REFRESH_BASE=0
WORK=""
trap 'if [ -n "$WORK" ]; then rm -rf "$WORK"; fi' EXIT

die() { echo "build.sh: $*" >&2; exit 2; }
say() { echo "build.sh: $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --tag) [ $# -ge 2 ] || die "--tag needs a name"; IMAGE="$2"; shift 2 ;;
    --base) [ $# -ge 2 ] || die "--base needs debian or an image"; BASE="$2"; shift 2 ;;
    --engine) [ $# -ge 2 ] || die "--engine needs buildah or docker"; ENGINE="$2"; shift 2 ;;
    --ca-file) [ $# -ge 2 ] || die "--ca-file needs a file"; CA_FILE="$2"; shift 2 ;;
    --refresh-base) REFRESH_BASE=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

[ -n "$VERSION" ] || die "no version in $ROOT/pyproject.toml"
if [ -z "$ENGINE" ]; then
  if command -v buildah >/dev/null 2>&1; then ENGINE=buildah
  elif command -v docker >/dev/null 2>&1; then ENGINE=docker
  else die "neither buildah nor docker is installed"
  fi
fi
case "$ENGINE" in
  buildah|docker) command -v "$ENGINE" >/dev/null 2>&1 || die "$ENGINE is not installed" ;;
  *) die "--engine is buildah or docker, not $ENGINE" ;;
esac
if [ -z "$BASE" ]; then
  if [ "$ENGINE" = buildah ] && command -v mmdebstrap >/dev/null 2>&1; then BASE=debian
  else BASE=python:3.11-slim
  fi
fi
if [ "$ENGINE" = buildah ] && [ -z "${BUILDAH_ISOLATION:-}" ] \
   && ! command -v runc >/dev/null 2>&1 && ! command -v crun >/dev/null 2>&1; then
  export BUILDAH_ISOLATION=chroot
fi

base_exists() {
  if [ "$ENGINE" = buildah ]; then buildah inspect --type image "$1" >/dev/null 2>&1
  else docker image inspect "$1" >/dev/null 2>&1
  fi
}

# Debian 12 with python3 (3.11) and its venv module, without documentation, manual pages and
# translations; a root filesystem tarball turned into a one-layer image.
make_debian_base() {
  command -v mmdebstrap >/dev/null 2>&1 || die "--base debian needs mmdebstrap (apt-get install mmdebstrap)"
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/redis-placer-base.XXXXXX")"
  local work="$WORK"
  say "making $DEBIAN_BASE with mmdebstrap"
  # merged /usr by mmdebstrap's own hook rather than the usrmerge package, which pulls in perl
  local hooks=()
  if [ -d /usr/share/mmdebstrap/hooks/merged-usr ]; then
    hooks=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
  fi
  mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates "${hooks[@]}" \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$work/rootfs.tar" >&2
  if [ "$ENGINE" = buildah ]; then
    local container
    container="$(buildah from scratch)"
    buildah add "$container" "$work/rootfs.tar" / >&2
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --cmd /bin/bash "$container" >&2
    buildah commit --rm "$container" "$DEBIAN_BASE" >&2
  else
    docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$DEBIAN_BASE" >&2
  fi
}

PULL=()
if [ "$BASE" = debian ]; then
  if [ "$REFRESH_BASE" = 1 ] || ! base_exists "$DEBIAN_BASE"; then
    make_debian_base
  fi
  BASE="$DEBIAN_BASE"
  [ "$ENGINE" = buildah ] && PULL=(--pull-never)
fi

say "building $IMAGE with $ENGINE from $BASE"
ARGS=(--build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION" -f "$ROOT/Dockerfile" -t "$IMAGE")
if [ -n "$CA_FILE" ]; then
  [ -f "$CA_FILE" ] || die "--ca-file $CA_FILE is not a file"
  ARGS+=(--secret "id=pip-ca,src=$CA_FILE")
fi
if [ "$ENGINE" = buildah ]; then
  buildah bud --layers "${PULL[@]}" "${ARGS[@]}" "$ROOT" >&2
  say "size: $(buildah images --format '{{.Size}}' "$IMAGE" | head -n 1)"
else
  docker build "${ARGS[@]}" "$ROOT" >&2
  say "size: $(docker image inspect --format '{{.Size}}' "$IMAGE") bytes"
fi
echo "$IMAGE"
