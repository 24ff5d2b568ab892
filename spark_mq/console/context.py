"""What every request of the console shares: the config, the page clients and the sampler.

The pages share one :class:`~spark_mq.Admin`, used by one request at a time (a lock), since
a client is not meant to be driven from several threads at once; waitress serves requests
on several threads. The topic browser opens its own short-lived consumer per page. The
sampler has its own Admin on its own thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import threading
from collections.abc import Iterator

from flask import Flask, current_app

from spark_mq.client.admin import Admin
from spark_mq.client.consumer import Consumer
from spark_mq.console.config import ConsoleConfig
from spark_mq.console.sampler import ConsoleSampler

EXTENSION_KEY = "spark_mq_console"


@dataclasses.dataclass
class ConsoleContext:
    config: ConsoleConfig
    admin: Admin
    sampler: ConsoleSampler
    #: The token every form carries (CSRF): random per console process, so a page of
    #: another site cannot post a form this console accepts.
    csrf_token: str = dataclasses.field(default_factory=lambda: secrets.token_urlsafe(32))
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def admin_client(self) -> Iterator[Admin]:
        with self.lock:
            yield self.admin

    def open_consumer(self) -> Consumer:
        return Consumer(**self.config.client_kwargs(), enable_auto_commit=False)

    def install(self, app: Flask) -> None:
        app.extensions[EXTENSION_KEY] = self


def context() -> ConsoleContext:
    """The context of the application serving this request."""
    found: ConsoleContext = current_app.extensions[EXTENSION_KEY]
    return found
