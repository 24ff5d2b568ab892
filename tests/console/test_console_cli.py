"""``spark-mq console`` as a process: it serves the pages on the port it prints, and stops
cleanly on SIGTERM (exit 143); with ``--command-config`` it reaches a broker's SASL listener."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from inprocess_broker import InProcessBroker
from tls_certs import BrokerPki

from spark_mq import Admin, UserScramCredentialUpsertion

REPO_ROOT = Path(__file__).resolve().parents[2]


def _topics_page_of_console(*where: str) -> str:
    """Start ``spark-mq console`` with ``where`` (its broker options), read its topics page,
    stop it with SIGTERM (exit 143) and return the page."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_mq.cli", "console", *where, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # blocks until the console says where it listens
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/ \(read-only", line)
        assert found, line
        with urllib.request.urlopen(found.group(1) + "/topics", timeout=60) as response:
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
