"""Which connections a broker accepts: Kafka's ``max.connections``, ``max.connections.per.ip``
and ``max.connections.per.ip.overrides``, and a reserve of file descriptors for the logs.

Every accepted socket is checked before anything is read from it. Over a limit it is closed
at once (the client sees the connection closed, a retriable network error, and retries after
its backoff); the connections already open keep working. Kafka closes a connection over its
per-address limit the same way, but holds one over ``max.connections`` in the listen backlog
until a slot frees; spark_mq closes that one too, since a socket held open costs the very
descriptor the limit is there to save.

Addresses. A TCP peer counts under its IP address (an IPv4 address mapped into IPv6 counts as
the IPv4 one). Every peer of the Unix socket counts under the one pseudo-address
:data:`UNIX_PEER` (``unix``): they are all processes of this host and user (the socket is
mode 0600), so they share one budget, which ``max.connections.per.ip.overrides`` can set
(``unix:1000``).

Descriptors. Segments, indexes and checkpoints need descriptors too: a broker that let
connections take them all could not roll a segment or create a topic ("Too many open files").
``main`` raises the soft ``RLIMIT_NOFILE`` to the hard limit at startup; a connection is then
refused when accepting it would leave fewer than ``broker.fd.headroom`` descriptors below the
limit, counting every descriptor the process holds: the logs' files as they are now plus
room for the ones they open later. The count is measured (``/proc/self/fd``) and kept up to
date between measurements by counting connections: it is measured again when it comes close
to the limit, at most every :data:`FD_MEASURE_INTERVAL_S` while refusing, and by
:meth:`ConnectionQuotas.refresh` (every second) once half the room is used. The logs keep
every segment's files open, so they grow into the headroom as data arrives; once they have
taken part of it (:meth:`ConnectionQuotas.fd_excess`), the server closes as many of its
longest-idle connections, so that the headroom is whole again and the logs never run out
while connections wait. Within one second the logs can still use at most the headroom.

Refusals are logged without flooding: the first after a quiet spell at WARNING, the rest as
one summary per :data:`REFUSAL_LOG_INTERVAL_S` with counts per reason.

Threads: event loop only.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import os
import resource
import time
from collections.abc import Callable, Mapping
from typing import Final

logger = logging.getLogger("spark_mq.broker.connection_quotas")

#: The address every Unix-socket peer counts under.
UNIX_PEER: Final = "unix"
#: Refusals after the first are summarized at most this often.
REFUSAL_LOG_INTERVAL_S: Final = 10.0
#: While refusing for want of descriptors, the count is measured again at most this often.
FD_MEASURE_INTERVAL_S: Final = 0.25
#: ``broker.fd.headroom`` of -1: a tenth of the limit, at least this, at most half the limit.
AUTO_FD_HEADROOM_MIN: Final = 256


def peer_host(peername: object) -> str:
    """The address a peer counts under: its IP for TCP, :data:`UNIX_PEER` otherwise."""
    if not isinstance(peername, tuple) or not peername or not isinstance(peername[0], str):
        return UNIX_PEER
    return normalize_host(peername[0])


def normalize_host(host: str) -> str:
    """An IP address in canonical form (IPv4 inside IPv6 as IPv4); other text unchanged."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def raise_open_file_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (best effort); the soft limit now,
    None if unlimited."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard not in (soft, resource.RLIM_INFINITY):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            logger.warning("could not raise RLIMIT_NOFILE from %d to %d: %s", soft, hard, exc)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def open_file_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE``, None if unlimited or unknown."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def count_open_fds() -> int:
    """Descriptors this process holds now."""
    for path in ("/proc/self/fd", "/dev/fd"):
        try:
            # The directory's own descriptor is listed too.
            return len(os.listdir(path)) - 1
        except OSError:
            continue
    return 0


def auto_fd_headroom(limit: int) -> int:
    """What ``broker.fd.headroom=-1`` keeps free under ``limit``."""
    return min(max(AUTO_FD_HEADROOM_MIN, limit // 10), limit // 2)


class _RefusalLog:
    """The first refusal after a quiet spell at WARNING; the rest summarized."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._logged_at: float | None = None
        self._suppressed: collections.Counter[str] = collections.Counter()

    def refused(self, peer: str, reason: str) -> None:
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= REFUSAL_LOG_INTERVAL_S:
            self.flush(force=True)
            logger.warning(
                "refusing connection from %s: %s (further refusals are summarized every %d s)",
                peer,
                reason,
                int(REFUSAL_LOG_INTERVAL_S),
            )
            self._logged_at = now
        else:
            self._suppressed[reason] += 1

    def flush(self, *, force: bool = False) -> None:
        """Log the summary of the refusals since the last line, if it is due."""
        if not self._suppressed:
            if self._logged_at is not None and self._clock() - self._logged_at >= (
                REFUSAL_LOG_INTERVAL_S
            ):
                self._logged_at = None  # a quiet spell: the next refusal is logged in full
            return
        assert self._logged_at is not None
        now = self._clock()
        if not force and now - self._logged_at < REFUSAL_LOG_INTERVAL_S:
            return
        total = sum(self._suppressed.values())
        reasons = "; ".join(f"{reason}: {n}" for reason, n in self._suppressed.most_common())
        logger.warning(
            "refused %d more connections in the last %.0f s (%s)",
            total,
            now - self._logged_at,
            reasons,
        )
        self._suppressed.clear()
        self._logged_at = now


class ConnectionQuotas:
    """Counts of open connections, broker-wide and per address, and the descriptor reserve.

    >>> q = ConnectionQuotas(max_connections=3, max_per_ip=2, fd_limit=None)
    >>> [q.admit("10.0.0.1", "p") for _ in range(3)], q.admit("unix", "p"), q.count
    ([True, True, False], True, 3)
    >>> q.admit("unix", "p"), q.release("10.0.0.1"), q.admit("unix", "p")
    (False, None, True)
    """

    def __init__(
        self,
        *,
        max_connections: int,
        max_per_ip: int,
        per_ip_overrides: Mapping[str, int] | None = None,
        fd_limit: int | None,
        fd_headroom: int = -1,
        count_fds: Callable[[], int] = count_open_fds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = {
            normalize_host(host): n for host, n in (per_ip_overrides or {}).items()
        }
        self.fd_limit = fd_limit
        if fd_limit is None:
            fd_headroom = 0
        elif fd_headroom < 0:
            fd_headroom = auto_fd_headroom(fd_limit)
        self.fd_headroom = fd_headroom
        #: Open descriptors may not go above this (None: no limit).
        self.fd_cap = None if fd_limit is None else fd_limit - self.fd_headroom
        self.count = 0
        self.per_ip: collections.Counter[str] = collections.Counter()
        self._count_fds = count_fds
        self._clock = clock
        self._log = _RefusalLog(clock)
        self._fds_measured = 0
        self._count_at_measure = 0
        self._measured_at = float("-inf")
        if self.fd_cap is not None:
            self._measure()

    def limit_for(self, host: str) -> int:
        return self.per_ip_overrides.get(host, self.max_per_ip)

    @property
    def open_fds_estimate(self) -> int:
        """Descriptors open now, as last measured plus the connections opened since."""
        return self._fds_measured + self.count - self._count_at_measure

    def admit(self, host: str, peer: str) -> bool:
        """Count a new connection from ``host`` (the socket is open already), or refuse it
        (logged, rate-limited); ``peer`` names it in the log."""
        reason = self._refusal(host)
        if reason is not None:
            self._log.refused(peer, reason)
            return False
        self.count += 1
        self.per_ip[host] += 1
        return True

    def release(self, host: str) -> None:
        """An admitted connection closed."""
        self.count -= 1
        left = self.per_ip[host] - 1
        if left:
            self.per_ip[host] = left
        else:
            del self.per_ip[host]
        assert self.count >= 0 and left >= 0, "a connection released twice"

    def refresh(self) -> None:
        """Housekeeping (every second): log a due summary of refusals, and measure the open
        descriptors again once half the room under the cap is used."""
        self._log.flush()
        cap = self.fd_cap
        if cap is not None and self.open_fds_estimate > cap // 2:
            self._measure()

    def fd_excess(self) -> int:
        """Descriptors open beyond the cap, as last measured: the logs opened files into the
        headroom while the connections held the rest (the server then closes that many of
        the longest-idle connections)."""
        cap = self.fd_cap
        return 0 if cap is None else max(0, self.open_fds_estimate - cap)

    def describe(self) -> str:
        """The limits, for the startup log."""
        fds = (
            "no descriptor limit"
            if self.fd_cap is None
            else f"RLIMIT_NOFILE {self.fd_limit}, {self.fd_headroom} kept for the logs "
            f"(broker.fd.headroom), {self.open_fds_estimate} open"
        )
        return (
            f"max.connections {self.max_connections}, max.connections.per.ip "
            f"{self.max_per_ip}"
            + "".join(f", {host}: {n}" for host, n in sorted(self.per_ip_overrides.items()))
            + f"; {fds}"
        )

    # -----------------------------------------------------------------------------------------

    def _refusal(self, host: str) -> str | None:
        if self.count >= self.max_connections:
            return f"max.connections ({self.max_connections}) reached"
        limit = self.limit_for(host)
        if self.per_ip[host] >= limit:
            return f"max.connections.per.ip ({limit}) reached for {host}"
        cap = self.fd_cap
        # The estimate leaves out the socket being judged, which is open already.
        if cap is not None and self.open_fds_estimate >= cap:
            # The logs may have closed files since the last measurement.
            if self._clock() - self._measured_at >= FD_MEASURE_INTERVAL_S:
                self._measure(judging=1)
            if self.open_fds_estimate >= cap:
                return (
                    f"{self.open_fds_estimate} of {self.fd_limit} file descriptors "
                    f"(RLIMIT_NOFILE) are open and {self.fd_headroom} are kept for the logs "
                    "(broker.fd.headroom)"
                )
        return None

    def _measure(self, *, judging: int = 0) -> None:
        """Count the open descriptors; ``judging`` of them belong to a socket being judged,
        which the estimate leaves out until it is admitted."""
        self._fds_measured = self._count_fds()
        self._count_at_measure = self.count + judging
        self._measured_at = self._clock()
