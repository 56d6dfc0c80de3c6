#!/usr/bin/env bash
# THE run command: install into .venv, write the example model repository to models/, serve it.
# Usage: scripts/serve.sh [convoy serve flags...]   e.g. scripts/serve.sh --grpc-port 9001
set -euo pipefail

# shellcheck source=scripts/venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"

echo "==> pip install -e .[dev]"
# The dev extra carries onnx, which builds the example models.
python -m pip install --quiet --disable-pip-version-check -e '.[dev]'

echo "==> writing the example model repository to models/"
python scripts/gen_models.py models --skip-existing

echo "==> convoy serve --model-repository models $*"
exec convoy serve --model-repository models "$@"
