"""One broker's Prometheus metrics: its registry, the counters the request path updates, and
the HTTP endpoint that serves them.

Each broker has a registry of its own (not prometheus_client's global one), so brokers run
in one process (tests, an embedded broker beside a client) do not mix their figures.

Counters updated where things happen (names in docs/operations.md):

- the request metrics (:mod:`~spark_mq.broker.metrics.requests`);
- per topic, Kafka's BrokerTopicMetrics: ``spark_mq_topic_bytes_in_total``,
  ``spark_mq_topic_records_in_total`` (produce appends), ``spark_mq_topic_bytes_out_total``
  (bytes sent to consumers), and ``spark_mq_replication_bytes_in_total`` /
  ``spark_mq_replication_bytes_out_total`` (between brokers). The ``topic`` label takes the
  broker's topics, a set the operator controls;
- ``spark_mq_quota_throttle_time_seconds`` (a histogram by ``quota_type``:
  ``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``): each throttle a
  client over its quota got. Never labelled by user or client id, whose set a client
  controls;
- ``spark_mq_isr_shrinks_total``, ``spark_mq_isr_expands_total``,
  ``spark_mq_leader_elections_total``, ``spark_mq_unclean_leader_elections_total``;
- SASL re-authentication (:mod:`~spark_mq.broker.metrics.sasl_metrics`).

The state read at scrape time is :mod:`~spark_mq.broker.metrics.state_collector`'s.

The endpoint is prometheus_client's own WSGI server (a daemon thread), started when
``metrics.port`` is not -1 and shut down with the broker.
"""

from __future__ import annotations

import logging
import threading
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from spark_mq.broker.metrics.requests import RequestMetrics
from spark_mq.broker.metrics.sasl_metrics import SaslMetrics
from spark_mq.broker.metrics.state_collector import BrokerStateCollector

log = logging.getLogger(__name__)


class BrokerMetrics:
    """The metrics of one broker (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = RequestMetrics()
        self.registry.register(self.requests)
        self.state = BrokerStateCollector()
        self.registry.register(self.state)
        self.sasl = SaslMetrics(self.registry)
        self._bytes_in = Counter(
            "spark_mq_topic_bytes_in",
            "Bytes of record batches appended by producers, by topic.",
            ["topic"],
            registry=self.registry,
        )
        self._records_in = Counter(
            "spark_mq_topic_records_in",
            "Records appended by producers, by topic.",
            ["topic"],
            registry=self.registry,
        )
        self._bytes_out = Counter(
            "spark_mq_topic_bytes_out",
            "Bytes of records sent to consumers, by topic.",
            ["topic"],
            registry=self.registry,
        )
        self._replication_in = Counter(
            "spark_mq_replication_bytes_in",
            "Bytes this broker appended as a follower.",
            registry=self.registry,
        )
        self._replication_out = Counter(
            "spark_mq_replication_bytes_out",
            "Bytes this broker sent to follower brokers.",
            registry=self.registry,
        )
        self.isr_shrinks = Counter(
            "spark_mq_isr_shrinks",
            "In-sync replica sets this broker shrank as leader.",
            registry=self.registry,
        )
        self.isr_expands = Counter(
            "spark_mq_isr_expands",
            "In-sync replica sets this broker expanded as leader.",
            registry=self.registry,
        )
        self.leader_elections = Counter(
            "spark_mq_leader_elections",
            "Partition leaders this broker elected as controller (offline partitions, "
            "controlled shutdowns, preferred elections, reassignments).",
            registry=self.registry,
        )
        self.unclean_leader_elections = Counter(
            "spark_mq_unclean_leader_elections",
            "Leaders elected from outside the in-sync replicas (possible data loss), by this "
            "broker as controller.",
            registry=self.registry,
        )
        self._throttle = Histogram(
            "spark_mq_quota_throttle_time_seconds",
            "Throttle times given to clients over a client quota, by quota type.",
            ["quota_type"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 11.0, 30.0),
            registry=self.registry,
        )
        # Label children per topic, resolved once: labels() takes a lock and builds a key.
        self._topic_in: dict[str, tuple[Any, Any]] = {}
        self._topic_out: dict[str, Any] = {}
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def produced(self, topic: str, size: int, records: int) -> None:
        """A producer's batch was appended (any thread)."""
        children = self._topic_in.get(topic)
        if children is None:
            children = (self._bytes_in.labels(topic), self._records_in.labels(topic))
            self._topic_in[topic] = children
        children[0].inc(size)
        children[1].inc(records)

    def fetched(self, topic: str, size: int, *, replica: bool) -> None:
        """``size`` bytes of ``topic`` are sent to a consumer or (``replica``) a follower."""
        if replica:
            self._replication_out.inc(size)
            return
        child = self._topic_out.get(topic)
        if child is None:
            child = self._topic_out[topic] = self._bytes_out.labels(topic)
        child.inc(size)

    def throttled(self, quota_type: str, throttle_ms: int) -> None:
        """A client over its ``quota_type`` quota is throttled ``throttle_ms``."""
        self._throttle.labels(quota_type).observe(throttle_ms / 1000)

    def isr_changed(self, old_size: int, new_size: int) -> None:
        """The controller accepted this leader's ISR change (event loop)."""
        if new_size < old_size:
            self.isr_shrinks.inc()
        elif new_size > old_size:
            self.isr_expands.inc()

    def leader_elected(self, unclean: bool) -> None:
        """This broker, as controller, elected a partition leader (any thread)."""
        self.leader_elections.inc()
        if unclean:
            self.unclean_leader_elections.inc()

    def replicated(self, size: int) -> None:
        """This broker appended ``size`` bytes as a follower."""
        self._replication_in.inc(size)

    # -----------------------------------------------------------------------------------------
    # The endpoint

    def serve(self, host: str, port: int) -> int:
        """Serve GET /metrics on ``host:port`` (0: a free port); returns the bound port."""
        server, thread = start_http_server(port, addr=host or "0.0.0.0", registry=self.registry)
        self._server, self._thread = server, thread
        bound = int(server.server_address[1])
        log.info("serving Prometheus metrics on http://%s:%d/metrics", host or "0.0.0.0", bound)
        return bound

    def close(self) -> None:
        """Stop the endpoint, if any (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
