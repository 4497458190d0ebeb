# redis-placer: the image for the binder Deployment and the rebalance CronJob.
#   deploy/image/build.sh                        buildah where present, else docker
#   docker build -t registry.example.com/redis-placer:0.1.0 .
#
# BASE is any image with python3.11 and its venv module at the same path in both stages:
# python:3.11-slim (the default), or the Debian 12 base that deploy/image/build.sh makes
# locally with mmdebstrap (--base debian), which needs no container registry.
ARG BASE=python:3.11-slim

# --- builder: a virtual environment holding redis-placer and exactly its pinned dependencies --
FROM ${BASE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
# Behind a proxy that re-signs TLS, pip trusts the certificate authorities handed in as the build
# secret pip-ca (deploy/image/build.sh --ca-file; only mounted while a step runs, never stored).
# The dependencies first, at the versions CI tests (constraints.txt): this layer is built again
# only when pyproject.toml or constraints.txt change, not for every change of the code.
COPY pyproject.toml constraints.txt ./
RUN --mount=type=secret,id=pip-ca,required=false \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && python3 -m venv /opt/redis-placer \
 && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
 && /opt/redis-placer/bin/pip install --no-compile -c constraints.txt -r requirements.txt

COPY README.md ./
COPY models ./models
COPY solver ./solver
COPY placer ./placer
# What the runtime never imports goes, each checked below: pandas (OR-tools' cp_model needs it
# only for its pandas helpers, which solver.cpsat keeps from loading), and the kubernetes
# client's asyncio half (kubernetes.aio) with aiohttp and the libraries only it needs. Then
# every module of the three packages is imported, so the build fails if any of them needs
# what was left out; then pip goes too, and the bytecode is compiled once (the root
# filesystem is read-only at run time, so Python could not cache it there).
RUN --mount=type=secret,id=pip-ca,required=false \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && /opt/redis-placer/bin/pip install --no-compile --no-deps -c constraints.txt . \
 && /opt/redis-placer/bin/pip uninstall --yes pandas aiohttp aiohttp-retry aiosignal attrs \
        aiohappyeyeballs frozenlist multidict propcache yarl \
 && rm -rf /opt/redis-placer/lib/python3.11/site-packages/kubernetes/aio \
 && /opt/redis-placer/bin/python -c "import importlib, pkgutil, sys; [importlib.import_module(m.name) for p in ('models', 'solver', 'placer') for m in pkgutil.walk_packages(importlib.import_module(p).__path__, p + '.')]; left = sorted({'pandas', 'aiohttp', 'kubernetes.aio'} & set(sys.modules)); sys.exit(f'imported: {left}' if left else 0)" \
 && /opt/redis-placer/bin/redis-placer demo > /dev/null \
 && /opt/redis-placer/bin/pip uninstall --yes pip setuptools \
 && /opt/redis-placer/bin/python -m compileall -q -j 0 /opt/redis-placer/lib

# --- runtime -------------------------------------------------------------------------------
FROM ${BASE}

LABEL org.opencontainers.image.title="redis-placer" \
      org.opencontainers.image.description="Constraint-solver placement of Redis Cluster shards on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"

# Must equal pyproject.toml's version (tests/test_dockerfile.py checks it).
ARG VERSION=0.1.0
LABEL org.opencontainers.image.version="${VERSION}"

# PATH in full: a base made from a root filesystem has no PATH of its own to extend.
ENV PATH=/opt/redis-placer/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

COPY --from=builder /opt/redis-placer /opt/redis-placer
RUN groupadd --system --gid 10001 redis-placer \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin redis-placer \
 && test "$(redis-placer --version)" = "redis-placer, version ${VERSION}"

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
EXPOSE 9090

ENTRYPOINT ["redis-placer"]
CMD ["--help"]
