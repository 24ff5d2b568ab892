"""The files a broker keeps at the root of the log directory it owns, beside storage's.

``broker.meta.json`` (written by the lock owner only, replaced atomically)::

    {"version": 0, "cluster_id": "<22 url-safe chars>", "epoch": 7}
    {"version": 0, "cluster_id": "...", "epoch": 7, "joined_cluster_id": "<ZooKeeper's
     /cluster/id>", "joined_broker_id": 2}                    (once it joined a cluster)

``epoch`` is the broker epoch: it grows by one every time a broker process takes over the
directory (after it has the lock and before it serves), so a client can tell a restarted
broker from the one it knew, and partitions use it as their leader epoch. ``cluster_id`` is
made on the first start and kept. A crash between taking the lock and the write leaves the
old epoch; the next start increments from there, so epochs never repeat. ``joined_*`` record
the cluster (ZooKeeper's ``/cluster/id``) and ``broker.id`` the directory first served in a
cluster with: a broker refuses to join another cluster, or under another id, with it, as
Kafka refuses a ``meta.properties`` that disagrees (its logs are that broker's replicas).

``broker.json`` (the endpoint; written by the lock owner once it accepts connections,
replaced atomically, removed first thing on shutdown)::

    {"version": 0, "pid": 4242, "epoch": 7, "node_id": 0, "unix_path": "/dir/broker.sock",
     "host": "127.0.0.1", "port": 40123, "started_ms": 1732190000000,
     "token_listeners": ["10.0.0.5:41234"]}

``token_listeners`` (empty when none; absent from older files) are the TCP listeners opened
for Spark executors, where only the directory's token authenticates
(``broker/embedded_token.py``); the file is rewritten when one opens.

``unix_path`` or ``host``/``port`` may be null when that listener is not configured. The
file may be stale (a killed broker cannot remove it): readers check the pid and connect to
be sure; only the directory lock is the truth about who owns the directory.

Everything the broker creates in the directory is its owner's only, as a database's data
directory is: the broker process runs with umask :data:`PRIVATE_UMASK` (files 0600,
directories 0700) and a directory it creates is 0700. A directory the user made with a looser
mode is left as it is (:func:`exposure_warning` is logged at startup): other users can then
list the names in it (topic names), but read only files made by an older spark_mq, which did
not restrict them.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any, Final

from spark_mq.errors import (
    CorruptCheckpointError,
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.storage.checkpoint_file import atomic_write_bytes

#: The broker's umask: what it creates is readable and writable by its owner only.
PRIVATE_UMASK: Final = 0o077
#: The mode of a log directory the broker (or ensure_broker) creates.
PRIVATE_DIR_MODE: Final = 0o700

META_FILE: Final = "broker.meta.json"
ENDPOINT_FILE: Final = "broker.json"
FILE_VERSION: Final = 0
#: Both files hold a few hundred bytes; anything larger is not ours.
MAX_FILE_BYTES: Final = 64 * 1024


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_FILE_BYTES:
        return None
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or obj.get("version") != FILE_VERSION:
        return None
    return obj


@dataclasses.dataclass(frozen=True)
class BrokerMeta:
    """The persistent identity of the broker of a directory: cluster id and epoch."""

    cluster_id: str
    epoch: int
    #: ZooKeeper's ``/cluster/id`` of the cluster this directory's broker joined; None until
    #: it first joins one.
    joined_cluster_id: str | None = None
    #: The ``broker.id`` it joined with.
    joined_broker_id: int | None = None

    @staticmethod
    def new_cluster_id() -> str:
        """22 URL-safe characters, the shape of Kafka's cluster ids."""
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    @classmethod
    def read(cls, root: str | os.PathLike[str]) -> BrokerMeta | None:
        """The stored meta, None if absent; CorruptCheckpointError if unreadable."""
        path = Path(root) / META_FILE
        if not path.exists():
            return None
        obj = _read_json(path)
        cluster_id = None if obj is None else obj.get("cluster_id")
        epoch = None if obj is None else obj.get("epoch")
        joined_cluster = None if obj is None else obj.get("joined_cluster_id")
        joined_broker = None if obj is None else obj.get("joined_broker_id")
        if (
            not isinstance(cluster_id, str)
            or type(epoch) is not int
            or epoch < 0
            or not (joined_cluster is None or isinstance(joined_cluster, str))
            or not (joined_broker is None or type(joined_broker) is int)
        ):
            raise CorruptCheckpointError(
                f"{path} is not a valid broker meta file; if it was damaged, remove it (the "
                "broker then starts a new cluster id and epochs restart at 1)",
                path=str(path),
            )
        return cls(cluster_id, epoch, joined_cluster, joined_broker)

    def _write(self, root: str | os.PathLike[str]) -> None:
        payload: dict[str, Any] = {
            "version": FILE_VERSION,
            "cluster_id": self.cluster_id,
            "epoch": self.epoch,
        }
        if self.joined_cluster_id is not None:
            payload["joined_cluster_id"] = self.joined_cluster_id
            payload["joined_broker_id"] = self.joined_broker_id
        atomic_write_bytes(Path(root) / META_FILE, json.dumps(payload).encode())

    def join_cluster(
        self, root: str | os.PathLike[str], cluster_id: str, broker_id: int
    ) -> BrokerMeta:
        """Check that the directory may serve broker ``broker_id`` of cluster ``cluster_id``,
        recording both the first time. Raises :class:`InconsistentClusterIdError` or
        :class:`InconsistentBrokerIdError` (nothing written) if it served another.

        Only the holder of the directory lock may call this.
        """
        path = Path(root) / META_FILE
        if self.joined_cluster_id not in (None, cluster_id):
            raise InconsistentClusterIdError(
                f"log directory {root} belongs to cluster {self.joined_cluster_id}, but "
                f"ZooKeeper's /cluster/id is {cluster_id}: check zookeeper.connect (and its "
                f"chroot); to move the directory to this cluster, delete {path} (its logs "
                "then count as this broker's)",
                directory=str(root),
            )
        if self.joined_broker_id not in (None, broker_id):
            raise InconsistentBrokerIdError(
                f"log directory {root} holds the logs of broker {self.joined_broker_id}, but "
                f"broker.id is {broker_id}: give this directory's broker its old id back, or "
                "use another log directory",
                directory=str(root),
            )
        if self.joined_cluster_id == cluster_id and self.joined_broker_id == broker_id:
            return self
        joined = dataclasses.replace(self, joined_cluster_id=cluster_id, joined_broker_id=broker_id)
        joined._write(root)
        return joined

    @classmethod
    def take_over(cls, root: str | os.PathLike[str]) -> BrokerMeta:
        """Increment the epoch (creating the file on first start) and persist it.

        Only the holder of the directory lock may call this.
        """
        old = cls.read(root)
        meta = (
            cls(cls.new_cluster_id(), 1)
            if old is None
            else dataclasses.replace(old, epoch=old.epoch + 1)
        )
        meta._write(root)
        return meta


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where the broker that owns a directory listens (the content of ``broker.json``)."""

    pid: int
    epoch: int
    node_id: int
    unix_path: str | None
    host: str | None
    port: int | None
    started_ms: int
    #: The Prometheus endpoint's bound port (metrics.port), None when not served.
    metrics_port: int | None = None
    #: The token listeners opened for Spark executors (``host:port``; OpenTokenListener).
    token_listeners: tuple[str, ...] = ()

    @property
    def addresses(self) -> list[BrokerAddress]:
        """Every address, the local socket first (it is the faster one)."""
        out = []
        if self.unix_path:
            out.append(BrokerAddress(unix_path=self.unix_path))
        if self.host and self.port:
            out.append(BrokerAddress(host=self.host, port=self.port))
        return out

    def to_json(self) -> bytes:
        return json.dumps(
            {"version": FILE_VERSION, **dataclasses.asdict(self)}, sort_keys=True
        ).encode()

    def write(self, root: str | os.PathLike[str]) -> None:
        atomic_write_bytes(Path(root) / ENDPOINT_FILE, self.to_json())

    @classmethod
    def read(cls, root: str | os.PathLike[str]) -> Endpoint | None:
        """The recorded endpoint, or None if there is none or it cannot be parsed."""
        obj = _read_json(Path(root) / ENDPOINT_FILE)
        if obj is None:
            return None
        try:
            endpoint = cls(
                pid=obj["pid"],
                epoch=obj["epoch"],
                node_id=obj["node_id"],
                unix_path=obj.get("unix_path"),
                host=obj.get("host"),
                port=obj.get("port"),
                started_ms=obj["started_ms"],
                metrics_port=obj.get("metrics_port"),
                token_listeners=tuple(obj.get("token_listeners") or ()),
            )
        except (KeyError, TypeError):
            return None
        ints_ok = all(type(v) is int for v in (endpoint.pid, endpoint.epoch, endpoint.started_ms))
        if not ints_ok or endpoint.pid <= 0:
            return None
        return endpoint

    @staticmethod
    def remove_if_ours(root: str | os.PathLike[str], pid: int, epoch: int) -> None:
        """Remove ``broker.json`` if it still names this broker (never a successor's)."""
        current = Endpoint.read(root)
        if current is not None and current.pid == pid and current.epoch == epoch:
            Path(root, ENDPOINT_FILE).unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists (it may be a different one after pid reuse)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


SOCKET_FILE: Final = "broker.sock"
#: sun_path holds 108 bytes on Linux (104 on macOS), the terminating NUL included.
MAX_SOCKET_PATH_BYTES: Final = 100


def socket_path_for(root: str | os.PathLike[str]) -> str:
    """Where the broker of ``root`` puts its Unix socket.

    ``<root>/broker.sock`` when that path fits ``sun_path``; otherwise a name derived from
    the directory's absolute path under a private runtime directory
    (``$XDG_RUNTIME_DIR/spark-mq`` if that fits too, else ``/tmp/spark-mq-<uid>``, mode
    0700), so that it is
    still one fixed path per directory. Either way the path is recorded in ``broker.json``.
    """
    absolute = Path(root).resolve()
    candidate = absolute / SOCKET_FILE
    if len(os.fsencode(candidate)) <= MAX_SOCKET_PATH_BYTES:
        return str(candidate)
    digest = hashlib.sha256(os.fsencode(absolute)).hexdigest()[:32]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    bases = [Path(runtime) / "spark-mq"] if runtime else []
    bases.append(Path(f"/tmp/spark-mq-{os.getuid()}"))
    for base in bases:
        path = base / f"{digest}.sock"
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES or base == bases[-1]:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
            return str(path)
    raise AssertionError("unreachable: the last base is always taken")


def exposure_warning(root: str | os.PathLike[str]) -> str | None:
    """What to tell the owner of ``root`` if other users may enter it; None if only the
    owner may (or it cannot be checked)."""
    try:
        mode = os.stat(root).st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o077:
        return None
    return (
        f"log directory {root} has mode {mode:04o}: other local users can list its files "
        "(topic names) and read those an older spark_mq created readable by all (what this "
        f"broker creates is owner-only); to keep them out run: chmod -R go-rwx {root}"
    )
