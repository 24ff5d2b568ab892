#!/usr/bin/env bash
# Install spark-mq and run the main job. Until the Spark source and sink land, the main job
# is the storage engine demo (examples/storage_demo.py); extra arguments go to it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh dev
exec "$PY" examples/storage_demo.py "$@"
