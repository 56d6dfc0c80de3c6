#!/usr/bin/env bash
# THE test command: lint, format check, import contracts, types, the documentation site, tests.
# CI runs it via .ci/run.
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

# The pytorch and openvino extras too: their backends' tests must run here, not skip; and the
# docs extra, which builds the site.
step "pip install -e .[dev,pytorch,openvino,docs]" python -m pip install --quiet \
    --disable-pip-version-check -e '.[dev,pytorch,openvino,docs]'
step "ruff check" ruff check .
step "ruff format --check" ruff format --check .
step "lint-imports" lint-imports
step "mypy" mypy
# The documentation site into site/ (ignored by git): a broken link or anchor, a missing page or
# a page left out of the navigation fails it (not --quiet: it hides the warnings that --strict
# counts, and the build then passes). tests/docs then opens every page in headless Chromium.
export DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1  # the theme's and a plugin's banners
step "mkdocs build --strict" mkdocs build --strict
# ONNX Runtime's usage telemetry off in the test run's own processes too, as in the server's
# (server.contract.framework_telemetry); the environment's own choice rules.
export ORT_DISABLE_TELEMETRY="${ORT_DISABLE_TELEMETRY:-1}"
step "pytest" python -m pytest -q "$@"
