"""Who can reach the embedded broker of a directory and read its files (issue 26, point 5):
its owner only. It listens on TCP only when asked, and everything it creates is 0700/0600,
checked on real files and, when the tests run as root, by a second local user (``nobody``)
who tries to connect and to read."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq import Admin, Consumer, Producer
from spark_mq.broker import broker_status, ensure_broker, stop_broker
from spark_mq.broker.dir_files import ENDPOINT_FILE, Endpoint
from spark_mq.storage.batch_decoder import decode_records
from spark_mq.storage.record_batch import encode_batch

NEVER_IDLE = {"broker.idle.exit.ms": "-1"}
WITH_TCP = {**NEVER_IDLE, "listeners": "UNIX://,PLAINTEXT://127.0.0.1:0"}
NOBODY = 65534


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The usual umask (022), so that what is private is so because the broker made it so."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def shared_base() -> Iterator[Path]:
    """A directory under /tmp that every local user may enter (pytest's tmp_path is under a
    0700 directory, which would keep a second user out whatever the broker did)."""
    base = Path(tempfile.mkdtemp(prefix="mq-access-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    for endpoint in base.glob(f"**/{ENDPOINT_FILE}"):
        stop_broker(endpoint.parent, timeout_ms=30_000)
    shutil.rmtree(base, ignore_errors=True)


def _use(directory: Path) -> None:
    """A topic with records, a group's committed offset and a transaction, so that the
    directory holds every kind of file: segments, indexes, both internal topics."""
    with Admin(path=str(directory)) as admin:
        admin.create_topic("t", partitions=2)
    with Producer(path=str(directory), transactional_id="tx") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("t", b"secret", partition=0)
        producer.commit_transaction()
    with Consumer(path=str(directory), group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["t"])
        for _ in range(100):
            if consumer.poll_batch(timeout_ms=200).num_rows:
                break
        consumer.commit()


def _modes(directory: Path) -> dict[str, int]:
    out = {}
    for path in [directory, *directory.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISSOCK(mode):
            out[str(path.relative_to(directory))] = stat.S_IMODE(mode)
    return out


def test_the_embedded_broker_listens_on_tcp_only_when_asked(tmp_path: Path, raw_connect) -> None:
    plain = tmp_path / "plain"
    ensure_broker(plain, config=NEVER_IDLE)
    endpoint = Endpoint.read(plain)
    assert endpoint is not None and (endpoint.host, endpoint.port) == (None, None)
    assert all(a.unix_path for a in broker_status(plain).addresses)

    asked = tmp_path / "asked"
    ensure_broker(asked, config=WITH_TCP)
    tcp = [a for a in broker_status(asked).addresses if a.unix_path is None]
    assert len(tcp) == 1 and tcp[0].host == "127.0.0.1"
    with raw_connect(tcp[0]) as conn:
        assert conn.produce("t", 0, encode_batch(pa.array([b"v"]))).error_code == 0
        _, records = conn.fetch("t", 0, 0)
        assert decode_records(records).column("value").to_pylist() == [b"v"]


def test_everything_the_broker_creates_is_its_owners_only(tmp_path: Path, loose_umask) -> None:
    directory = tmp_path / "new" / "mq"
    ensure_broker(directory, config=NEVER_IDLE)
    _use(directory)
    running = _modes(directory)
    socket_mode = stat.S_IMODE((directory / "broker.sock").stat().st_mode)
    stop_broker(directory)
    stopped = _modes(directory)  # checkpoints and the clean-shutdown marker now exist too

    for modes in (running, stopped):
        dirs = {p: m for p, m in modes.items() if (directory / p).is_dir()}
        files = {p: m for p, m in modes.items() if p not in dirs}
        assert set(dirs.values()) == {0o700}, dirs
        assert set(files.values()) == {0o600}, files
    assert socket_mode == 0o600
    for name in ("broker.json", "broker.meta.json", "broker.log", "broker.out", ".start.lock"):
        assert name in running
    assert any(p.startswith("__consumer_offsets-") for p in stopped)
    assert any(p.startswith("__transaction_state-") for p in stopped)
    assert any(p.endswith(".log") and p.startswith("t-0") for p in stopped)


def test_an_existing_open_directory_is_left_as_it_is_with_a_warning(
    tmp_path: Path, loose_umask
) -> None:
    directory = tmp_path / "mine"
    directory.mkdir(mode=0o755)
    ensure_broker(directory, config=NEVER_IDLE)
    _use(directory)
    stop_broker(directory)
    modes = _modes(directory)
    assert modes.pop(".") == 0o755
    assert set(modes.values()) <= {0o700, 0o600}
    warnings = [
        json.loads(line)
        for line in (directory / "broker.log").read_text().splitlines()
        if "chmod -R go-rwx" in line
    ]
    assert [w["level"] for w in warnings] == ["WARNING"]
    assert "mode 0755" in warnings[0]["msg"]


_INTRUDER = r"""
import json, os, socket, sys
directory = sys.argv[1]
out = {"uid": os.getuid()}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = type(exc).__name__
def connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(directory, "broker.sock"))
    s.close()
attempt("connect", connect)
for name in ("broker.json", "broker.log", "t-0/00000000000000000000.log"):
    attempt(name, lambda name=name: open(os.path.join(directory, name), "rb").read())
attempt("list", lambda: os.listdir(directory))
print(json.dumps(out))
"""


def _as_nobody(directory: Path) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.skip("acting as a second local user needs root")
    setpriv = shutil.which("setpriv")
    python = shutil.which("python3", path="/usr/bin:/bin")
    if setpriv is None or python is None:
        pytest.skip("needs setpriv and a system python3")
    done = subprocess.run(
        [
            setpriv,
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            python,
            "-I",
            "-c",
            _INTRUDER,
            str(directory),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    result: dict[str, str] = json.loads(done.stdout)
    assert result.pop("uid") == NOBODY
    return result


def test_another_local_user_can_neither_connect_nor_read(shared_base: Path) -> None:
    directory = shared_base / "mq"
    ensure_broker(directory, config=NEVER_IDLE)
    _use(directory)
    assert Endpoint.read(directory).port is None  # and no TCP port to try
    assert set(_as_nobody(directory).values()) == {"PermissionError"}


def test_in_an_open_directory_another_user_sees_names_but_reads_nothing(
    shared_base: Path, loose_umask
) -> None:
    directory = shared_base / "mq"
    directory.mkdir(mode=0o755)
    ensure_broker(directory, config=NEVER_IDLE)
    _use(directory)
    result = _as_nobody(directory)
    assert result.pop("list") == "ok"
    assert set(result.values()) == {"PermissionError"}
