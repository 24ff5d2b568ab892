"""``spark-mq console`` as a process: it serves the pages on the port it prints, and stops
cleanly on SIGTERM (exit 143)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from spark_mq import Admin

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_console_command_serves_until_sigterm(mq_dir: Path, admin: Admin) -> None:
    admin.create_topic("from-the-cli", partitions=1)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "spark_mq.cli", "console", "--path", str(mq_dir), "--port", "0"],
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
            assert "from-the-cli" in response.read().decode()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
