#!/usr/bin/env bash
# Install what the tests need, then lint (ruff), type-check (mypy) and run every test,
# slow multi-process and fault-injection tests included. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow" -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh dev
# The client benchmark's smoke tests compare against Redis Streams (Debian's redis-server).
# Install it where we may (CI runs as root); elsewhere those few tests say they were skipped.
if ! command -v redis-server >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "== installing redis-server (Debian package) for the benchmark smoke tests"
  (apt-get install -y -q redis-server >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q redis-server >/dev/null 2>&1; }) ||
    echo "   could not install redis-server; the Redis smoke tests will be skipped"
fi
# The cluster tests run against a real ZooKeeper: Debian's zookeeper package (it pulls in
# Java; tests/cluster starts the server from its jars). Without it those tests are skipped.
if [ ! -f /usr/share/java/zookeeper.jar ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "== installing zookeeper (Debian package, with Java) for the cluster tests"
  (apt-get install -y -q zookeeper >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q zookeeper >/dev/null 2>&1; }) ||
    echo "   could not install zookeeper; the cluster tests will be skipped"
fi
# The console's browser tests (tests/console) drive headless Chromium with Selenium through
# Debian's chromium and chromium-driver packages. Without them those tests are skipped.
if ! command -v chromedriver >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "== installing chromium and chromium-driver (Debian packages) for the console tests"
  (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }) ||
    echo "   could not install chromium; the console's browser tests will be skipped"
fi
echo "== ruff"
"$PY" -m ruff check .
"$PY" -m ruff format --check .
echo "== mypy"
"$PY" -m mypy
# Two workers (pytest-xdist): most slow tests wait on broker, ZooKeeper and Spark processes,
# so two of them overlap well even on two cores. Each test file goes whole to one worker, and
# all Spark tests to one (tests/conftest.py). PYTEST_WORKERS=0 runs in one process; later
# arguments override these (e.g. `-n 0`).
echo "== pytest"
"$PY" -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile "$@"
