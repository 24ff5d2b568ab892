"""``spark-mq console`` as a process: it serves the pages on the port it prints, and stops
cleanly on SIGTERM (exit 143); with ``--command-config`` it reaches a broker's SASL listener."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from inprocess_broker import InProcessBroker
from tls_certs import BrokerPki

from spark_mq import Admin, UserScramCredentialUpsertion

REPO_ROOT = Path(__file__).resolve().parents[2]


def _start_console(*where: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``spark-mq console`` with ``where`` (its broker options); return the process
    and its URL. Its stderr after the first line is drained, so that warnings cannot fill the
    pipe and block it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_mq.cli", "console", *where, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stderr is not None
    line = process.stderr.readline()  # blocks until the console says where it listens
    found = re.search(r"on (http://127\.0\.0\.1:\d+)/ \(read-only", line)
    if not found:
        process.kill()
        process.wait()
    assert found, line
    threading.Thread(target=process.stderr.read, daemon=True).start()
    return process, found.group(1)


def _topics_page_of_console(*where: str) -> str:
    """Start ``spark-mq console`` with ``where`` (its broker options), read its topics page,
    stop it with SIGTERM (exit 143) and return the page."""
    process, url = _start_console(*where)
    try:
        with urllib.request.urlopen(url + "/topics", timeout=60) as response:
            assert response.status == 200
            page = response.read().decode()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143
        return page
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_console_command_serves_until_sigterm(mq_dir: Path, admin: Admin) -> None:
    admin.create_topic("from-the-cli", partitions=1)
    assert "from-the-cli" in _topics_page_of_console("--path", str(mq_dir))


def _request_pages(url: str, stop: threading.Event, served: list[int]) -> None:
    """Request the topics page until ``stop``, counting the pages served in ``served[0]``."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url + "/topics", timeout=10) as response:
                response.read()
            served[0] += 1
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # the console stopped


def test_sigterm_stops_a_console_that_is_serving_pages(mq_dir: Path, admin: Admin) -> None:
    # waitress's loop swallows any exception raised while it handles a connection, so a
    # SIGTERM that came then left the console serving. The signal is sent while three
    # clients keep requesting pages, several times, each at a different moment.
    admin.create_topic("busy", partitions=1)
    for trial in range(8):
        process, url = _start_console("--path", str(mq_dir))
        stop = threading.Event()
        served = [0]
        clients = [
            threading.Thread(target=_request_pages, args=(url, stop, served)) for _ in range(3)
        ]
        try:
            for client in clients:
                client.start()
            time.sleep(0.4 + 0.05 * trial)
            assert served[0] > 0, "no page was served before the signal"
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 143, f"trial {trial}"
        finally:
            stop.set()
            for client in clients:
                client.join()
            if process.poll() is None:
                process.kill()
                process.wait()


def test_console_reaches_a_sasl_listener_with_a_command_config(tmp_path: Path) -> None:
    pki = BrokerPki.create(tmp_path)
    (tmp_path / "b").mkdir()
    broker = InProcessBroker(tmp_path / "b", pki.broker.cert, pki.broker.key)
    try:
        with Admin(bootstrap_servers=broker.plain) as admin:
            admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion("dave", "SCRAM-SHA-512", "dave-secret")]
            )
            admin.create_topic("behind-sasl", 1)
        settings = tmp_path / "client.properties"
        settings.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.username=dave\nsasl.password=dave-secret\n"
        )
        page = _topics_page_of_console(
            "--bootstrap-server", broker.sasl, "--command-config", str(settings)
        )
        assert "behind-sasl" in page
    finally:
        broker.close()
