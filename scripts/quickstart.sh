#!/usr/bin/env bash
# Install spark-mq and run the main job. Until the Spark source and sink land, the main job
# is the streaming pipeline on the embedded broker (examples/pipeline_demo.py): a producer, a
# consumer that aggregates and republishes, and a check that every event counted once.
# Extra arguments go to it (e.g. --records 5000000 --fresh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh dev
exec "$PY" examples/pipeline_demo.py "$@"
