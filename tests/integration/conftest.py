"""Fixtures for tests against real broker processes, speaking the raw wire protocol.

Fixture names are stable (the client tests use them too):

- ``broker_dir``: an empty log directory in the test's tmp dir;
- ``broker``: a broker process serving ``broker_dir`` (TCP on an ephemeral loopback port and
  a Unix socket), a :class:`BrokerProcess` with ``.address`` (TCP), ``.unix_address``,
  ``.dir``, ``.pid``, ``.stop()``, ``.kill()`` and ``.connect()``;
- ``raw_connect``: :class:`RawConnection` itself, to connect to any address;
- ``subprocess_env``: an environment that imports this checkout's spark_mq;
- ``start_broker``: a factory ``start_broker(dir=None, overrides=None, **kw) -> BrokerProcess``
  (``kw``: ``wait``, ``open_file_limit``) for tests that need several brokers, restarts or a
  lowered resource limit; every broker it started is stopped at the end.

:class:`RawConnection` is a tiny synchronous client: ``call(request, records)`` sends one
request and returns a :class:`Reply` (decoded body, records bytes, frame error), plus
helpers for the common requests.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.dir_files import Endpoint
from spark_mq.protocol import admin, fetch, metadata, offsets, produce
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import decode_frame_error, encode_request, spec_for_request
from spark_mq.protocol.framing import SIZE, decode_response

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0


def broker_env() -> dict[str, str]:
    """The environment for broker subprocesses: this checkout's spark_mq first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@dataclasses.dataclass
class Reply:
    """One response: the decoded body (None with a frame error), its records, the error."""

    body: Any
    records: bytes
    frame_error: int = 0
    error_message: str | None = None


class RawConnection:
    """A blocking connection that sends requests and reads responses, one at a time."""

    def __init__(self, address: BrokerAddress, timeout_s: float = 30.0) -> None:
        self.address = address
        self.sock = address.connect(timeout_s)
        self.sock.settimeout(timeout_s)
        self._next_cid = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -----------------------------------------------------------------------------------------

    def send(self, request: Any, records: bytes = b"", *, api_version: int | None = None) -> int:
        self._next_cid += 1
        head, body = encode_request(
            request,
            correlation_id=self._next_cid,
            client_id="raw-test",
            records_len=len(records),
            api_version=api_version,
        )
        self.sock.sendall(head + body + records)
        return self._next_cid

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exactly(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> Any:
        """The next response frame (framing.ResponseFrame), or None at EOF."""
        prefix = self._recv_exactly(SIZE.size)
        if prefix is None:
            return None
        (size,) = SIZE.unpack(prefix)
        data = self._recv_exactly(size)
        if data is None:
            return None
        return decode_response(data)

    def recv(self, request: Any) -> Reply:
        """Read the response to ``request`` (sent earlier)."""
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError(f"the broker closed the connection ({self.address})")
        if frame.frame_error:
            body = decode_frame_error(frame)
            return Reply(None, b"", frame.frame_error, body.error_message)
        spec = spec_for_request(request)
        return Reply(spec.decode_response(frame.body), bytes(frame.records))

    def call(self, request: Any, records: bytes = b"", *, api_version: int | None = None) -> Reply:
        self.send(request, records, api_version=api_version)
        return self.recv(request)

    def closed_by_peer(self, timeout_s: float = 10.0) -> bool:
        """Whether the broker closes this connection (EOF or reset) within ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    # -----------------------------------------------------------------------------------------
    # Helpers

    def produce(
        self, topic: str, partition: int, records: bytes, *, acks: int = 1, **kwargs: Any
    ) -> Any:
        """Produce one partition's bytes; the partition's response (None for acks=0)."""
        request = produce.ProduceRequest(
            acks=acks,
            timeout_ms=30_000,
            topics=[
                produce.ProduceTopic(topic, [produce.ProducePartition(partition, len(records))])
            ],
            **kwargs,
        )
        if acks == 0:
            self.send(request, records)
            return None
        reply = self.call(request, records)
        assert reply.frame_error == 0, reply.error_message
        return reply.body.topics[0].partitions[0]

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        max_bytes: int = 50 * 1024 * 1024,
        partition_max_bytes: int = 10 * 1024 * 1024,
        isolation_level: int = fetch.READ_UNCOMMITTED,
    ) -> tuple[Any, bytes]:
        """Fetch one partition; (partition response, its record bytes)."""
        request = fetch.FetchRequest(
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            topics=[
                fetch.FetchTopic(
                    topic, [fetch.FetchPartition(partition, offset, partition_max_bytes)]
                )
            ],
            isolation_level=isolation_level,
        )
        reply = self.call(request)
        assert reply.frame_error == 0, reply.error_message
        return reply.body.topics[0].partitions[0], reply.records

    def create_topic(
        self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None
    ) -> Any:
        reply = self.call(
            admin.CreateTopicsRequest(
                [admin.CreatableTopic(name, partitions, -1, dict(configs or {}))]
            )
        )
        return reply.body.topics[0]

    def metadata(self, topics: list[str] | None = None, auto_create: bool = False) -> Any:
        return self.call(metadata.MetadataRequest(topics, auto_create)).body

    def list_offset(
        self, topic: str, partition: int, timestamp: int, isolation_level: int = 0
    ) -> Any:
        reply = self.call(
            offsets.ListOffsetsRequest(
                [
                    offsets.ListOffsetsTopic(
                        topic, [offsets.ListOffsetsPartition(partition, timestamp)]
                    )
                ],
                isolation_level=isolation_level,
            )
        )
        return reply.body.topics[0].partitions[0]


class BrokerProcess:
    """A broker subprocess serving one directory."""

    def __init__(self, directory: Path, proc: subprocess.Popen[bytes], stderr_path: Path):
        self.dir = directory
        self.proc = proc
        self.pid = proc.pid
        self.stderr_path = stderr_path
        self.endpoint: Endpoint | None = None

    @property
    def address(self) -> BrokerAddress:
        assert self.endpoint is not None and self.endpoint.host and self.endpoint.port
        return BrokerAddress(host=self.endpoint.host, port=self.endpoint.port)

    @property
    def unix_address(self) -> BrokerAddress:
        assert self.endpoint is not None and self.endpoint.unix_path
        return BrokerAddress(unix_path=self.endpoint.unix_path)

    @property
    def epoch(self) -> int:
        assert self.endpoint is not None
        return self.endpoint.epoch

    def connect(self, *, unix: bool = False, timeout_s: float = 30.0) -> RawConnection:
        return RawConnection(self.unix_address if unix else self.address, timeout_s)

    def wait_serving(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode} before serving:\n{self.log()}"
                )
            endpoint = Endpoint.read(self.dir)
            if endpoint is not None and endpoint.pid == self.pid:
                self.endpoint = endpoint
                return
            time.sleep(0.02)
        raise RuntimeError(f"broker did not start within {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait: the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL and wait: no clean shutdown, the directory is left as a crash leaves it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


#: ``python -c`` program: set RLIMIT_NOFILE to argv[1], then run the broker with the rest.
_LIMITED_BROKER = """
import resource, runpy, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
sys.argv = ["spark_mq.broker", *sys.argv[2:]]
runpy.run_module("spark_mq.broker", run_name="__main__", alter_sys=True)
"""


def launch_broker(
    directory: Path,
    overrides: Mapping[str, str] | None = None,
    *,
    stderr_path: Path,
    wait: bool = True,
    open_file_limit: int | None = None,
) -> BrokerProcess:
    """Start ``python -m spark_mq.broker`` on ``directory`` (TCP ephemeral + Unix socket);
    ``open_file_limit`` sets its RLIMIT_NOFILE, soft and hard, before the broker starts."""
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,UNIX://",
        "log.retention.check.interval.ms": "300000",
        **(overrides or {}),
    }
    args = ["--log-dir", str(directory)]
    for key, value in props.items():
        args += ["--override", f"{key}={value}"]
    cmd = [sys.executable, "-m", "spark_mq.broker", *args]
    if open_file_limit is not None:
        # Set in the child itself rather than with Popen's preexec_fn, which is unsafe in a
        # process with threads.
        cmd = [sys.executable, "-c", _LIMITED_BROKER, str(open_file_limit), *args]
    with open(stderr_path, "ab") as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            env=broker_env(),
        )
    broker = BrokerProcess(directory, proc, stderr_path)
    if wait:
        broker.wait_serving()
    return broker


@pytest.fixture
def broker_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "mq"
    directory.mkdir()
    return directory


@pytest.fixture
def start_broker(broker_dir: Path, tmp_path: Path) -> Iterator[Any]:
    started: list[BrokerProcess] = []

    def _start(
        directory: Path | None = None, overrides: Mapping[str, str] | None = None, **kw: Any
    ) -> BrokerProcess:
        n = len(started)
        broker = launch_broker(
            directory or broker_dir, overrides, stderr_path=tmp_path / f"broker-{n}.stderr", **kw
        )
        started.append(broker)
        return broker

    yield _start
    for broker in started:
        try:
            broker.stop(30)
        except subprocess.TimeoutExpired:
            broker.kill()


@pytest.fixture
def broker(start_broker: Any) -> BrokerProcess:
    return start_broker()  # type: ignore[no-any-return]


@pytest.fixture
def raw_connect() -> Any:
    """``raw_connect(address, timeout_s=30.0) -> RawConnection``, for addresses that do not
    come from a ``broker`` fixture (an ``ensure_broker`` result, say)."""
    return RawConnection


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """The environment for Python subprocesses that must import this checkout's spark_mq."""
    return broker_env()
