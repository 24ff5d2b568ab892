"""``spark-mq`` as the shell runs it: real processes, exit statuses, signals and pipes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_command, subprocess_env

from spark_mq import Producer
from spark_mq.broker import broker_status, stop_broker

pytestmark = pytest.mark.slow


@pytest.fixture
def path(tmp_path):
    directory = tmp_path / "mq"
    yield str(directory)
    stop_broker(directory)


def popen(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        cli_command(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=subprocess_env(),
        **kwargs,
    )


def wait_serving(path: str, proc: subprocess.Popen | None = None, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = broker_status(path)
        if status is not None and status.state == "serving":
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"broker exited: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    raise AssertionError("the broker did not start serving")


def test_console_script_and_module_entry_points(run_cli):
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith(b"spark-mq ")
    script = Path(sys.executable).with_name("spark-mq")
    if not script.exists():
        pytest.skip("the console script is not installed (pip install -e .)")
    out = subprocess.run([str(script), "--version"], capture_output=True, check=False)
    assert (out.returncode, out.stdout) == (0, r.stdout)


def test_session_and_exit_statuses(run_cli, path):
    p = ("--path", path)
    r = run_cli("topics", "create", "events", "--partitions", "2", *p)
    assert (r.returncode, r.stdout) == (0, b"Created topic events with 2 partitions.\n")
    r = run_cli(
        "produce", "events", "--key-separator", "=", "--header", "h=1", "--partition", "1", *p,
        stdin=b"a=1\nb=2\n",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli("consume", "events", "--from-beginning", "--json", *p)
    records = [json.loads(line) for line in r.stdout.splitlines()]
    for rec in records:
        rec.pop("timestamp")
    assert records == [
        {"topic": "events", "partition": 1, "offset": 0, "key": "a", "value": "1",
         "headers": [["h", "1"]]},
        {"topic": "events", "partition": 1, "offset": 1, "key": "b", "value": "2",
         "headers": [["h", "1"]]},
    ]  # fmt: skip

    unknown = run_cli("consume", "nope", "--from-beginning", *p)
    assert unknown.returncode == 1
    assert unknown.stderr.decode().splitlines() == [
        "spark-mq: error: topic 'nope' does not exist; create it with: spark-mq topics create nope"
    ]
    bad_option = run_cli("topics", "list", "--colour", *p)
    assert bad_option.returncode == 2 and b"unrecognized arguments" in bad_option.stderr
    both = run_cli("topics", "list", *p, "--bootstrap-server", "localhost:9092")
    assert both.returncode == 2 and b"not both" in both.stderr
    for r in (unknown, bad_option, both):
        assert b"Traceback" not in r.stderr

    r = run_cli("perf", "produce", "events", "--num-records", "2000", *p)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    for field in ("records:", "records/s:", "MB/s:", "latency ms p50:", "latency ms p99:"):
        assert field in out
    r = run_cli("perf", "consume", "events", "--num-records", "2002", "--batch", "--json", *p)
    assert r.returncode == 0 and json.loads(r.stdout)["records"] == 2002


def test_broker_start_detach_status_stop(run_cli, path):
    r = run_cli("broker", "start", "--detach", "--path", path, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "serving" and doc["started_now"] is True
    r = run_cli("broker", "status", "--path", path)
    assert r.returncode == 0 and b"serving" in r.stdout
    r = run_cli("broker", "start", "--path", path)  # a second broker for the same directory
    assert r.returncode == 1 and b"already owns" in r.stderr
    r = run_cli("broker", "stop", "--path", path)
    assert r.returncode == 0 and r.stdout.startswith(b"Stopped the broker of ")
    assert broker_status(path) is None
    r = run_cli("broker", "status", "--path", path, "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["state"] == "not running"


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 0), (signal.SIGINT, 0)])
def test_broker_start_in_the_foreground_stops_cleanly_on_a_signal(path, signum, status):
    proc = popen(
        "broker", "start", "--path", path, "--override", "listeners=UNIX://,PLAINTEXT://127.0.0.1:0"
    )
    try:
        wait_serving(path, proc)
        proc.send_signal(signum)
        assert proc.wait(30) == status
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert broker_status(path) is None
    assert b"Traceback" not in proc.stderr.read()


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_consume_follow_until_a_signal(path, signum, status):
    with Producer(path=path) as producer:
        producer.send("live", b"one")
        producer.send("live", b"two")
        producer.flush()
        proc = popen("consume", "live", "--follow", "--from-beginning", "--path", path)
        try:
            assert proc.stdout.readline() == b"one\n"
            assert proc.stdout.readline() == b"two\n"
            producer.send("live", b"three").get(timeout=30)
            assert proc.stdout.readline() == b"three\n"
            proc.send_signal(signum)
            assert proc.wait(30) == status
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    err = proc.stderr.read()
    assert b"Consumed 3 records." in err and b"Traceback" not in err


def test_consume_into_a_closed_pipe_exits_quietly(path):
    import pyarrow as pa

    with Producer(path=path) as producer:
        values = pa.array([b"line %d" % i for i in range(20_000)], pa.binary())
        producer.send_batch("many", pa.table({"value": values})).get(timeout=30)
    proc = popen("consume", "many", "--from-beginning", "--path", path)
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # what `| head -1` does after its first line
    assert proc.wait(30) == 141
    assert b"Traceback" not in proc.stderr.read()
