#!/usr/bin/env bash
# Install spark-mq (with pyspark) and run the main job: examples/quickstart.py, a Spark
# Structured Streaming pipeline on the embedded broker. It produces purchase events, reads
# them with spark.readStream.format("spark_mq"), aggregates them, writes the totals back
# exactly once with writeStream.format("spark_mq"), and checks what a consumer reads back.
# Spark needs Java 17+; where it is missing and we may (root with apt-get), Debian's
# default-jre-headless is installed. Extra arguments go to the job (e.g. --events 500000).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh dev
if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing Java for Spark (Debian package default-jre-headless)"
    apt-get install -y -q default-jre-headless >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q default-jre-headless >/dev/null; }
  else
    echo "Spark needs Java 17 or newer on PATH (e.g. apt-get install default-jre-headless)" >&2
    exit 1
  fi
fi
exec "$PY" examples/quickstart.py "$@"
