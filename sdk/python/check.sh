#!/usr/bin/env bash
# The Python SDK's own checks, in the project's virtualenv (TOOLGATE_VENV,
# else scripts/pyenv.sh's): ruff (lint and format), mypy --strict, pytest.
# The tests that need a broker run when TOOLGATE_PULSAR_URL is set (make
# test sets it); without it they are skipped. scripts/test.sh runs this.
set -euo pipefail
cd "$(dirname "$0")"
venv="${TOOLGATE_VENV:-$(../../scripts/pyenv.sh)}"
cache="${TOOLGATE_CACHE:-$(cd ../.. && pwd)/.cache}/sdk-python"
mkdir -p "$cache"
"$venv/bin/ruff" check --cache-dir "$cache/ruff" .
"$venv/bin/ruff" format --check --cache-dir "$cache/ruff" .
"$venv/bin/mypy" --strict --cache-dir "$cache/mypy"
# The venv's pytest plugins are other tests' business.
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$venv/bin/python" -m pytest -q tests
