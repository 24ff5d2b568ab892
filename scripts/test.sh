#!/usr/bin/env bash
# Install what the tests need, then lint (ruff), type-check (mypy) and run every test,
# slow multi-process and fault-injection tests included. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh dev
echo "== ruff"
"$PY" -m ruff check .
"$PY" -m ruff format --check .
echo "== mypy"
"$PY" -m mypy
echo "== pytest"
"$PY" -m pytest -q "$@"
