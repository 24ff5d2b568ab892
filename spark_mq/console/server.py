"""Serving the console with waitress, a production WSGI server, on its own threads.

:class:`ConsoleServer` owns everything one console runs: the page Admin, the sampler and its
thread, the Flask application and the waitress server. ``spark-mq console`` calls
:meth:`ConsoleServer.serve_forever`; tests call :meth:`start` (a background thread) and
:meth:`close`.
"""

from __future__ import annotations

import threading

import waitress
from waitress.server import BaseWSGIServer

from spark_mq.client.admin import Admin
from spark_mq.console.app import create_app
from spark_mq.console.config import ConsoleConfig
from spark_mq.console.context import ConsoleContext
from spark_mq.console.sampler import ConsoleSampler

#: waitress worker threads: pages wait on the broker, so a few at once.
SERVER_THREADS = 4


class ConsoleServer:
    """A console bound to ``host:port`` (port 0: any free one; see :attr:`url`)."""

    def __init__(self, config: ConsoleConfig, *, host: str = "127.0.0.1", port: int = 8080):
        self.config = config
        page_admin = Admin(**config.client_kwargs())
        sampler_admin = Admin(**config.client_kwargs())
        self._admins = (page_admin, sampler_admin)
        self.sampler = ConsoleSampler(sampler_admin, history_samples=config.history_samples)
        self.context = ConsoleContext(config, page_admin, self.sampler)
        self.app = create_app(self.context)
        try:
            self._server: BaseWSGIServer = waitress.create_server(
                self.app, host=host, port=port, threads=SERVER_THREADS, ident="spark-mq console"
            )
        except OSError:  # the port is taken, or the address is not this machine's
            for admin in self._admins:
                admin.close()
            raise
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        """Sample and serve until interrupted (then :meth:`close`).

        waitress's loop runs on a thread of its own and this thread only waits: the loop
        catches every exception raised inside its handlers (asyncore's bare ``except``), so
        the exception a SIGTERM handler raises in the main thread would be swallowed whenever
        the signal came while the loop was handling a connection, and the console would keep
        serving."""
        self.start()
        assert self._thread is not None
        try:
            while self._thread.is_alive():
                self._thread.join(timeout=1.0)
        finally:
            self.close()

    def start(self) -> None:
        """Sample and serve on background threads."""
        self.sampler.start(self.config.sample_interval_ms / 1000)
        self._thread = threading.Thread(target=self._server.run, name="console", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.sampler.stop()
        # Closing the listening socket and the wake-up pipe empties waitress's socket map
        # once the open connections end; the worker threads stop here.
        self._server.task_dispatcher.shutdown()
        self._server.close()
        for admin in self._admins:
            admin.close()
