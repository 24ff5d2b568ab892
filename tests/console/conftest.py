"""Fixtures of the console's browser tests: a real broker, the console serving it on a free
port (waitress on a background thread, in this process), and headless Chromium driven by
Selenium through Debian's chromium-driver.

Without Chromium and its driver (``apt-get install chromium chromium-driver``: what
``scripts/test.sh`` does when it may) the browser tests are skipped, saying why.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Imported only when the extras are there: without them the whole directory is skipped.
pytest.importorskip("flask", reason="the console extra (flask, waitress, plotly) is not installed")
pytest.importorskip("selenium", reason="selenium (the dev extra) is not installed")

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from spark_mq import Admin
from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.console.config import ConsoleConfig
from spark_mq.console.server import ConsoleServer

#: The console samples often in tests, so the lag history moves within a wait.
SAMPLE_INTERVAL_MS = 250


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    chromium = _find("chromium", "chromium-browser", "google-chrome")
    driver_path = _find("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip(
            "the console's browser tests need Chromium and chromedriver "
            "(Debian: apt-get install chromium chromium-driver; scripts/test.sh does it as root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def mq_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The log directory of a real local broker, running for the module's tests."""
    path = tmp_path_factory.mktemp("console-mq")
    ensure_broker(path)
    try:
        yield path
    finally:
        stop_broker(path)


@pytest.fixture(scope="module")
def admin(mq_dir: Path) -> Iterator[Admin]:
    with Admin(path=mq_dir) as client:
        yield client


@pytest.fixture(scope="module")
def start_console() -> Iterator[Callable[..., ConsoleServer]]:
    """``start_console(**config)``: a console on a free port, closed after the module."""
    started: list[ConsoleServer] = []

    def start(**config: Any) -> ConsoleServer:
        config.setdefault("sample_interval_ms", SAMPLE_INTERVAL_MS)
        server = ConsoleServer(ConsoleConfig(**config), port=0)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="module")
def console(start_console: Callable[..., ConsoleServer], mq_dir: Path) -> ConsoleServer:
    """A read-only console of the module's broker."""
    return start_console(path=str(mq_dir))
