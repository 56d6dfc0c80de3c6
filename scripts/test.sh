#!/usr/bin/env bash
# THE test command: lint, format check, import contracts, types, tests. CI runs it via .ci/run.
# Usage: scripts/test.sh [PYTEST_ARGS...]
set -euo pipefail

# shellcheck source=scripts/venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"

step() {
    local name=$1
    shift
    echo "==> ${name}"
    local start_s=${SECONDS}
    local rc=0
    "$@" || rc=$?
    if ((rc != 0)); then
        echo "    ${name}: FAILED (exit ${rc}, $((SECONDS - start_s)) s)"
        exit "${rc}"
    fi
    echo "    ${name}: ok ($((SECONDS - start_s)) s)"
}

# The pytorch and openvino extras too: their backends' tests must run here, not skip.
step "pip install -e .[dev,pytorch,openvino]" python -m pip install --quiet \
    --disable-pip-version-check -e '.[dev,pytorch,openvino]'
step "ruff check" ruff check .
step "ruff format --check" ruff format --check .
step "lint-imports" lint-imports
step "mypy" mypy
step "pytest" python -m pytest -q "$@"
