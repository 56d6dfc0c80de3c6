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
COPY scripts/__init__.py scripts/models.py scripts/gen_models.py scripts/
COPY scripts/python_models/ scripts/python_models/
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip install "onnx>=1.16" "numpy>=1.26" \
    && python scripts/gen_models.py /models

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=builder /wheels /tmp/wheels
RUN pip install /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && useradd --system --no-create-home --shell /usr/sbin/nologin convoy
COPY --from=builder /models /models
USER convoy
EXPOSE 8000 8001 8002
CMD ["convoy", "serve", "--model-repository", "/models", "--host", "0.0.0.0"]
