"""A broker with PLAINTEXT, SSL and SASL_PLAINTEXT listeners for the tests of clients and
tools over TLS and SASL: the real BrokerServer, on an event loop thread of the test process
(tests/secured_broker.py runs one as a process, with an authorizer), with certificates from
tests/tls_certs.py. The PLAINTEXT listener is the test's own way in (adding users, creating
topics); SCRAM-SHA-512 is the SASL mechanism."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.server import BrokerServer
from spark_mq.storage.log_manager import LogManager


class InProcessBroker:
    """A broker with PLAINTEXT (for the test's own admin), SSL and SASL_PLAINTEXT listeners."""

    def __init__(self, root: Path, cert: Path, key: Path, **props: str) -> None:
        self.logs = LogManager(root / "mq")
        config = ServerConfig.from_properties(
            {
                "log.dirs": str(root / "mq"),
                "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
                "SASL_PLAINTEXT://127.0.0.1:0",
                "ssl.certificate.location": str(cert),
                "ssl.key.location": str(key),
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                **props,
            }
        )
        self.core = BrokerCore(config, self.logs, BrokerMeta.take_over(root / "mq"))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = BrokerServer(
            self.core, config.broker.parsed_listeners(), default_unix_path=str(root / "b.sock")
        )
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        by_name = {listener.scheme: address for listener, address in self.server.bound}
        self.plain, self.ssl, self.sasl = (
            str(by_name[n]) for n in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT")
        )

    def call(self, coro: Any, timeout_s: float = 30) -> Any:
        """Run ``coro`` on the broker's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def connection_count(self) -> int:
        async def count() -> int:
            return len(self.server.connections)

        return int(self.call(count()))

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(5.0), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.core.close()
        self.logs.close()
