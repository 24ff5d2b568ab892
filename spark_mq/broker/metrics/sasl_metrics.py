"""The broker's SASL re-authentication metrics (Kafka's KIP-368 selector metrics under
Prometheus names):

- ``spark_mq_sasl_reauthentications_total{mechanism, result}``: re-authentications on live
  connections, ``result`` ``success`` or ``failure`` (Kafka's
  ``successful-reauthentication-total`` and ``failed-reauthentication-total``). A failure is
  a user removed or whose password changed, another principal, another mechanism or a
  malformed exchange; its connection is closed.
- ``spark_mq_expired_connections_killed_total``: connections closed because their session
  expired and they sent something other than SaslHandshake (Kafka's
  ``expired-connections-killed-count``): clients that do not re-authenticate.

Labels are bounded: ``mechanism`` is one of the mechanisms spark_mq implements (the
connection's, which the listener enabled), ``result`` one of two values.

Threads: updated on the event loop; read by the scrape's thread (prometheus_client's
counters lock).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter

from spark_mq.broker.sasl.sasl_config import MECHANISMS

RESULTS: Final = ("success", "failure")


class SaslMetrics:
    """Counters of re-authentications and of connections closed at expiry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._reauthentications = Counter(
            "spark_mq_sasl_reauthentications",
            "SASL re-authentications on live connections (connections.max.reauth.ms), by "
            "mechanism and result (success, failure: the connection was closed).",
            ["mechanism", "result"],
            registry=registry,
        )
        self.expired_connections_killed = Counter(
            "spark_mq_expired_connections_killed",
            "Connections closed because their SASL session expired and they sent a request "
            "other than SaslHandshake (they did not re-authenticate in time).",
            registry=registry,
        )
        # Every child exists from the start, so that a scrape shows zeros rather than
        # nothing before the first re-authentication.
        self._children = {
            (mechanism, result): self._reauthentications.labels(mechanism, result)
            for mechanism in MECHANISMS
            for result in RESULTS
        }

    def reauthenticated(self, mechanism: str | None, *, ok: bool) -> None:
        """A re-authentication with ``mechanism`` ended (an unknown mechanism is not
        counted: it cannot have authenticated the connection in the first place)."""
        child = self._children.get((mechanism or "", "success" if ok else "failure"))
        if child is not None:
            child.inc()
