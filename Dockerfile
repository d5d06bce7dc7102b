# syntax=docker/dockerfile:1
# One image runs every part: `serve` (extender + webhook), `agent` (DaemonSet) and `fabric-sim`.
# Every Python package it installs is pinned, with hashes, in a lock generated from pyproject.toml
# (requirements.lock for the runtime, requirements-build.lock for the build backend; see docs/HARDENING.md,
# "Scanners"), so two builds of one commit install the same files and no resolver runs during a build.
# Only wheels are accepted: nothing is compiled, and a release without a wheel fails the build loudly.
#
# checkov:skip=CKV_DOCKER_2: Kubernetes ignores HEALTHCHECK; the manifests' probes check each container

FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements-build.lock requirements.lock ./
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements-build.lock
COPY pyproject.toml README.md ./
COPY webhook ./webhook
COPY certs ./certs
# No build isolation: the backend is the locked one above, not whatever the index serves today.
RUN /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist .
# A virtual environment that the runtime stage copies whole: no compiler, no pip cache in the final image.
# The dependencies come from the lock alone; the project's wheel adds no others (--no-deps).
RUN python -m venv /opt/imex-webhook \
 && /opt/imex-webhook/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements.lock \
 && /opt/imex-webhook/bin/pip install --no-cache-dir --no-deps /dist/*.whl

FROM python:3.11-slim
LABEL org.opencontainers.image.title="imex-webhook" \
      org.opencontainers.image.description="Keep multi-node-NVLink jobs inside one NVLink domain" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/imex-webhook /opt/imex-webhook
RUN groupadd --system --gid 10001 imex && useradd --system --uid 10001 --gid imex --no-create-home imex
ENV PATH=/opt/imex-webhook/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    XDG_STATE_HOME=/tmp/state
# The agent DaemonSet overrides the user: it needs root for sysfs (see manifests/agent.yaml).
USER 10001:10001
EXPOSE 8443
ENTRYPOINT ["imex-webhook"]
CMD ["serve", "--bind=0.0.0.0:8443"]
