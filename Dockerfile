# syntax=docker/dockerfile:1
# redis-placer: the image for the binder Deployment and the rebalance CronJob.
#   docker build -t ghcr.io/redis-placer/redis-placer:0.1.0 .

# --- builder: the project wheel and every dependency wheel ----------------------------------
FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY models ./models
COPY solver ./solver
COPY placer ./placer
# One wheel directory holds redis-placer and its pinned-by-resolution dependencies, so the
# runtime stage installs offline and carries no compiler, cache or source tree.
RUN pip wheel --wheel-dir /wheels .

# --- runtime --------------------------------------------------------------------------------
FROM python:3.11-slim

LABEL org.opencontainers.image.title="redis-placer" \
      org.opencontainers.image.description="Constraint-solver placement of Redis Cluster shards on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Must equal pyproject.toml's version (tests/test_dockerfile.py checks): the build fails
# rather than ship a stale wheel.
ARG VERSION=0.1.0
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "redis-placer==${VERSION}" \
 && groupadd --system --gid 10001 redis-placer \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin redis-placer

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
EXPOSE 9090

ENTRYPOINT ["redis-placer"]
CMD ["--help"]
