"""The broker: one process that owns a log directory and serves it over the wire protocol.

Run one with ``python -m spark_mq.broker --log-dir DIR`` (see :mod:`spark_mq.broker.main`),
or let a client start the embedded local broker of a directory with :func:`ensure_broker`.
``docs/broker.md`` covers configuration, the local broker's lifecycle and request handling.

Modules: ``config`` (BrokerConfig), ``main`` (process startup and shutdown), ``server``
(listeners), ``connection`` (one client), ``handlers/`` (one module per API family),
``core`` (shared state), ``replica_manager`` and ``partition`` (partitions, high watermark,
waiting fetches), ``producer_ids``, ``scheduler`` (background jobs), ``dir_files`` (the
broker's files in the directory), ``local`` (ensure/stop/status of the local broker),
``log_setup`` (JSON logging).
"""

from spark_mq.broker.config import BrokerConfig, ServerConfig
from spark_mq.broker.local import BrokerStatus, broker_status, ensure_broker, stop_broker

__all__ = [
    "BrokerConfig",
    "BrokerStatus",
    "ServerConfig",
    "broker_status",
    "ensure_broker",
    "stop_broker",
]
