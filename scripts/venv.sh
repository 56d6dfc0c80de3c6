# Sourced by serve.sh and test.sh: enter the repository root and the project's .venv (made on
# first use), with Convoy installed editable with its dev extra (onnx builds the example models).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ! -x .venv/bin/python ]]; then
    echo "==> creating .venv"
    python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
