# Convoy on CPU with the example model repository baked in at /models (Dockerfile.gpu: CUDA).
# The builder makes the wheel and writes the example models (onnx is needed only for that);
# the final stage holds the runtime install and /models, nothing else.

FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto/ proto/
COPY server/ server/
COPY batching/ batching/
COPY backends/ backends/
# Only what writes the example models: editing scripts/deploy/ (the dashboard, Prometheus) must
# not rebuild the image.
COPY scripts/__init__.py scripts/models.py scripts/framework_models.py scripts/gen_models.py scripts/
COPY scripts/python_models/ scripts/python_models/
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip install "onnx>=1.16" "numpy>=1.26" \
    && python scripts/gen_models.py /models

# Triton's conventions, so that a deployment written for Triton's image runs unchanged: the
# `tritonserver` command on PATH and at /opt/tritonserver/bin (Vertex AI's entry point calls that
# path), the user `triton-server` (uid 1000, which Triton's charts run as), ports 8000-8002, and
# no ENTRYPOINT: a `docker run IMAGE tritonserver ...` or a pod's args run as they are.
# With the cloud extra (boto3, gcloud-rest-storage, azure-storage-blob and azure-identity), so
# that --model-repository takes s3://, gs:// and as:// locations as Triton's image does; the build
# fails should a dependency bring another top-level `proto` package (proto-plus does), which a
# plain install would merge into Convoy's.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/tritonserver/bin:$PATH
COPY --from=builder /wheels /tmp/wheels
RUN wheel="$(echo /tmp/wheels/convoy-*.whl)" \
    && pip install "${wheel}[cloud]" \
    && python -c "import importlib.metadata as m, sys; p = set(m.packages_distributions().get('proto', [])); sys.exit(p != {'convoy'} and f'top-level proto package from {sorted(p)}: only convoy may own it')" \
    && rm -rf /tmp/wheels \
    && mkdir -p /opt/tritonserver/bin \
    && ln -s /usr/local/bin/tritonserver /opt/tritonserver/bin/tritonserver \
    && useradd --uid 1000 --create-home --shell /usr/sbin/nologin triton-server
COPY --from=builder /models /models
USER triton-server
EXPOSE 8000 8001 8002
CMD ["tritonserver", "--model-repository=/models"]
