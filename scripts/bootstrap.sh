#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install spark-mq with the given extras, once per
# version of pyproject.toml, setup.py and the C extension's source: a stamp file records what
# was installed, so re-runs are instant.
# Usage: source scripts/bootstrap.sh dev        (sets $PY to the venv's python)
set -euo pipefail
extras="${1:-dev}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

pick_python() {
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "spark-mq needs Python 3.11 or newer on PATH" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  "$(pick_python)" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
# The C extension is built by the install: a change to its source (or to setup.py) must
# install again, or the checkout would import a stale build.
stamp=".venv/.spark-mq-installed-${extras//,/-}-$(cat pyproject.toml setup.py spark_mq/storage/_varint_scan.c | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing spark-mq[$extras] into .venv ..."
  # compat mode puts the checkout on sys.path (a .pth file), so that pkgutil.iter_modules()
  # sees the top-level pyspark_spark_mq module: Spark finds the format through it.
  .venv/bin/python -m pip install --quiet -e ".[$extras]" --config-settings editable_mode=compat
  touch "$stamp"
fi
PY="$root/.venv/bin/python"
export PY
