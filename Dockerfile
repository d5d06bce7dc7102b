# syntax=docker/dockerfile:1
# One image runs every part: `serve` (extender + webhook), `agent` (DaemonSet) and `fabric-sim`.

FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m pip install --no-cache-dir --upgrade pip build
COPY pyproject.toml README.md ./
COPY webhook ./webhook
COPY certs ./certs
RUN python -m build --wheel --outdir /dist .
# A virtual environment that the runtime stage copies whole: no compiler, no pip cache in the final image.
RUN python -m venv /opt/imex-webhook && /opt/imex-webhook/bin/pip install --no-cache-dir /dist/*.whl

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
