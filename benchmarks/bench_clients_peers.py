"""What the client benchmark compares spark_mq with: a plain loopback socket and Redis Streams.

Used by ``bench_clients.py``; each function times only the part that moves records and returns
elapsed seconds (and, where it applies, latencies in nanoseconds).

- :func:`loopback_ceiling`: a sender process writes ``total_bytes`` to a TCP socket on
  127.0.0.1 in ``chunk_bytes`` writes; this process reads them with ``recv_into`` into a 1 MiB
  buffer. No framing, no parsing, no storage: the most any client/broker pair on this machine
  could move through one loopback connection driven from Python.
- :class:`RedisServer`: Debian's ``redis-server`` started on a free loopback port with no
  persistence (``--save ''``, ``--appendonly no``), stopped (and its directory removed) on exit.
- :func:`redis_produce`, :func:`redis_consume_xread`, :func:`redis_consume_xrange`,
  :func:`redis_latency`: XADD with pipelining, XREAD / XRANGE with COUNT, and paced end-to-end
  latency, through redis-py (which uses the hiredis parser when ``hiredis`` is installed).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

MIB = 1024 * 1024
REDIS_SERVER = "/usr/bin/redis-server"
REDIS_INSTALL_HINT = "apt-get install redis-server (and .venv/bin/pip install -e .[bench])"

#: The first 8 bytes of every latency-run record: the sender's CLOCK_MONOTONIC in ns, big
#: endian. CLOCK_MONOTONIC is one clock for every process on a Linux machine, so a consumer in
#: another process can subtract it from its own reading.
STAMP = struct.Struct(">q")
#: The stamp of warm-up records, which latency readers skip.
WARMUP_STAMP = STAMP.pack(0)
#: The pacing tick of :func:`paced_send`.
TICK_NS = 1_000_000

#: The helper processes here run plain sockets and redis-py only, and are started before
#: any thread exists in the benchmark process, so fork is safe and much cheaper than spawn.
_FORK = mp.get_context("fork")


# ---------------------------------------------------------------------------------------------
# Loopback socket ceiling


def _loopback_sender(port: int, total_bytes: int, chunk_bytes: int, pool: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sock.recv(1) != b"g":
            return
        view = memoryview(pool)
        span = len(pool) - chunk_bytes
        sent = 0
        pos = 0
        while sent < total_bytes:
            n = min(chunk_bytes, total_bytes - sent)
            sock.sendall(view[pos : pos + n])
            sent += n
            pos = (pos + 4099) % span if span > 0 else 0


def loopback_ceiling(total_bytes: int, chunk_bytes: int, pool: bytes) -> float:
    """Seconds to move ``total_bytes`` from a sender process to this one over TCP loopback.

    The clock starts when the reader tells the connected sender to go and stops when the last
    byte is read; process start-up and the connection are not timed.
    """
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        sender = _FORK.Process(
            target=_loopback_sender, args=(port, total_bytes, chunk_bytes, pool), daemon=True
        )
        sender.start()
        try:
            server.settimeout(60)
            conn, _ = server.accept()
            with conn:
                conn.settimeout(120)
                buf = bytearray(MIB)
                view = memoryview(buf)
                received = 0
                t0 = time.perf_counter()
                conn.sendall(b"g")
                while received < total_bytes:
                    n = conn.recv_into(view)
                    if n == 0:
                        raise RuntimeError(f"loopback sender closed after {received} bytes")
                    received += n
                seconds = time.perf_counter() - t0
        finally:
            sender.join(30)
            if sender.is_alive():
                sender.kill()
    return seconds


# ---------------------------------------------------------------------------------------------
# Redis Streams


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def redis_missing() -> str | None:
    """Why Redis Streams cannot be measured here, or None when it can."""
    if shutil.which(REDIS_SERVER) is None and shutil.which("redis-server") is None:
        return f"redis-server not found; install it with: {REDIS_INSTALL_HINT}"
    try:
        import redis  # noqa: F401
    except ImportError:
        return f"redis-py not installed; install it with: {REDIS_INSTALL_HINT}"
    return None


def hiredis_in_use() -> bool:
    try:
        from redis.utils import HIREDIS_AVAILABLE
    except ImportError:
        return False
    return bool(HIREDIS_AVAILABLE)


class RedisServer:
    """A throw-away ``redis-server`` on 127.0.0.1: no RDB snapshots, no AOF, own directory."""

    def __init__(self, parent: Path) -> None:
        self.binary = REDIS_SERVER if os.path.exists(REDIS_SERVER) else "redis-server"
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="redis_", dir=parent))
        self.proc: subprocess.Popen[bytes] | None = None

    def version(self) -> str:
        out = subprocess.run(
            [self.binary, "--version"], capture_output=True, text=True, check=False
        ).stdout
        for part in out.split():
            if part.startswith("v="):
                return part[2:]
        return out.strip() or "unknown"

    def __enter__(self) -> RedisServer:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.client().ping():
                    return self
            except Exception as exc:  # redis.ConnectionError while it starts up
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    log = (self.dir / "redis.log").read_text() if self.dir.exists() else ""
                    raise RuntimeError(f"redis-server did not start: {exc}\n{log}") from exc
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=60)

    def flush(self) -> None:
        self.client().flushall()


def stream_names(prefix: str, streams: int) -> list[str]:
    return [f"{prefix}:{p}" for p in range(streams)]


def redis_produce(
    port: int, names: Sequence[str], payloads: Sequence[bytes], n: int, pipeline: int
) -> float:
    """XADD ``n`` records round-robin over ``names``, ``pipeline`` commands per round trip."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
    pipe = r.pipeline(transaction=False)
    k = len(names)
    m = len(payloads)
    t0 = time.perf_counter()
    for i in range(n):
        pipe.xadd(names[i % k], {"v": payloads[i % m]})
        if (i + 1) % pipeline == 0:
            pipe.execute()
    pipe.execute()
    seconds = time.perf_counter() - t0
    r.close()
    return seconds


def redis_consume_xread(port: int, names: Sequence[str], n: int, count: int) -> float:
    """XREAD COUNT ``count`` over every stream from the start until ``n`` records are read."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
    last: dict[Any, Any] = dict.fromkeys(names, "0-0")
    got = 0
    t0 = time.perf_counter()
    while got < n:
        reply: Any = r.xread(last, count=count)
        if not reply:
            raise RuntimeError(f"XREAD returned nothing after {got} of {n} records")
        for name, entries in reply:
            got += len(entries)
            last[name.decode() if isinstance(name, bytes) else name] = entries[-1][0]
    seconds = time.perf_counter() - t0
    r.close()
    return seconds


def redis_consume_xrange(port: int, names: Sequence[str], n: int, count: int) -> float:
    """XRANGE COUNT ``count`` stream by stream (exclusive start after the last id)."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
    got = 0
    t0 = time.perf_counter()
    for name in names:
        start: bytes | str = "-"
        while got < n:
            entries: Any = r.xrange(name, min=start, count=count)
            if not entries:
                break
            got += len(entries)
            start = b"(" + entries[-1][0]
    seconds = time.perf_counter() - t0
    r.close()
    if got < n:
        raise RuntimeError(f"XRANGE read {got} of {n} records")
    return seconds


# ---------------------------------------------------------------------------------------------
# Paced end-to-end latency


def paced_send(
    rate: int,
    n: int,
    send: Callable[[int, bytes], None],
    after_tick: Callable[[], None],
    *,
    warmup: int = 0,
) -> float:
    """Call ``send(i, stamp)`` for ``warmup + n`` records at ``rate`` records/s.

    Time is cut into 1 ms ticks; each tick sends the records whose scheduled time has come
    (about ``rate / 1000``), then calls ``after_tick`` (a pipeline execute, say), and sleeps
    until the next tick (or until the next record's time, when records are further apart
    than a tick). ``stamp`` is the 8-byte CLOCK_MONOTONIC time of the send, or
    :data:`WARMUP_STAMP` for the first ``warmup`` records (connections and buffers warming
    up: readers skip them); the caller pads it to the record size. Returns the seconds the
    measured records took.

    The sleep is to the tick, not to the next record: sleeping 100 us per record at 10,000
    records/s cost this loop about 30 us of CPU per record in wake-ups alone (measured with
    ``time.thread_time`` and a ``send`` that does nothing: 30 us against 5.6 us with ticks),
    a third of a core taken from the processes being measured on a two-core machine.
    """
    mono = time.monotonic_ns
    total = warmup + n
    t0 = mono()
    t_measured = t0
    i = 0
    interval_ns = 1_000_000_000 / rate
    while i < total:
        now = mono()
        due = min(total, int((now - t0) / interval_ns) + 1)
        while i < due:
            if i == warmup:
                t_measured = mono()
            send(i, WARMUP_STAMP if i < warmup else STAMP.pack(mono()))
            i += 1
        after_tick()
        next_record = t0 + int(i * interval_ns)
        next_tick = t0 + ((now - t0) // TICK_NS + 1) * TICK_NS
        delay = (max(next_record, next_tick) - mono()) / 1e9
        if delay > 0:
            time.sleep(delay)
    return (mono() - t_measured) / 1e9


def latency_reader(
    conn: dict[str, Any], topic: str, partitions: int, n: int, pipe: Connection
) -> None:
    """Child process of a latency case (bench_clients, bench_small_batches): poll ``n``
    stamped records from the start of ``topic``'s partitions, send back their latencies (ns)."""
    try:
        from spark_mq import Consumer, TopicPartition

        with Consumer(**conn) as consumer:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(tps)
            consumer.poll(timeout_ms=10)
            pipe.send("ready")
            out = np.empty(n, dtype=np.int64)
            got = 0
            unpack = STAMP.unpack_from
            while got < n:
                polled = consumer.poll(timeout_ms=1000, max_records=10_000)
                now = time.monotonic_ns()
                for records in polled.values():
                    for r in records:
                        stamp = unpack(r.value or WARMUP_STAMP)[0]
                        if stamp and got < n:  # 0: a warm-up record
                            out[got] = now - stamp
                            got += 1
        pipe.send_bytes(out.tobytes())
    except Exception as exc:  # reported to the parent, which raises it
        pipe.send_bytes(f"error: latency consumer: {type(exc).__name__}: {exc}".encode())


def _redis_latency_reader(port: int, names: list[str], n: int, ready: Connection) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
    # The streams are new, so "0-0" sees every record; "$" would miss records added to a
    # stream while the reply of another one was being handled.
    last: dict[Any, Any] = dict.fromkeys(names, "0-0")
    out = np.empty(n, dtype=np.int64)
    got = 0
    ready.send("ready")
    while got < n:
        reply: Any = r.xread(last, count=10_000, block=1_000)
        now = time.monotonic_ns()
        for name, entries in reply or ():
            key = name.decode() if isinstance(name, bytes) else name
            last[key] = entries[-1][0]
            for _, fields in entries:
                stamp = STAMP.unpack_from(fields[b"v"])[0]
                if stamp and got < n:
                    out[got] = now - stamp
                    got += 1
    ready.send_bytes(out.tobytes())
    r.close()


def redis_latency(
    port: int, names: list[str], rate: int, n: int, record_bytes: int, *, warmup: int = 0
) -> tuple[np.ndarray, float]:
    """End-to-end latency of XADD (one pipeline per 1 ms tick) to a blocking XREAD in another
    process, at ``rate`` records/s, after ``warmup`` records; returns the latencies (ns) of
    the ``n`` measured records and the seconds they took to send."""
    import redis

    parent, child = _FORK.Pipe()
    reader = _FORK.Process(target=_redis_latency_reader, args=(port, names, n, child), daemon=True)
    reader.start()
    try:
        if not parent.poll(60) or parent.recv() != "ready":
            raise RuntimeError("Redis latency reader did not start")
        time.sleep(0.2)  # let its first XREAD BLOCK reach the server
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
        pipe = r.pipeline(transaction=False)
        pad = b"x" * (record_bytes - STAMP.size)
        k = len(names)

        def send(i: int, stamp: bytes) -> None:
            pipe.xadd(names[i % k], {"v": stamp + pad})

        def tick() -> None:
            if len(pipe):
                pipe.execute()

        seconds = paced_send(rate, n, send, tick, warmup=warmup)
        if not parent.poll(60):
            raise RuntimeError("Redis latency reader did not finish")
        lat = np.frombuffer(parent.recv_bytes(), dtype=np.int64)
        r.close()
    finally:
        reader.join(10)
        if reader.is_alive():
            reader.kill()
    return lat, seconds


def percentiles_ms(lat_ns: np.ndarray) -> dict[str, float]:
    """avg, p50, p95, p99, p99.9 and max of latencies given in ns, in ms."""
    if len(lat_ns) == 0:
        return {k: float("nan") for k in ("avg", "p50", "p95", "p99", "p99.9", "max")}
    ms = lat_ns / 1e6
    p50, p95, p99, p999 = np.percentile(ms, [50, 95, 99, 99.9])
    return {
        "avg": float(ms.mean()),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "p99.9": float(p999),
        "max": float(ms.max()),
    }
