"""A broker process with SASL listeners and an authorizer, for the tests of authenticated
principals and their ACLs (tests/broker/test_sasl_acls.py, tests/spark/test_source_sink_secured.py).

The broker runs as ``python -m spark_mq.broker`` with a Unix socket beside its SASL
listeners: the socket's peer is the OS user (``User:<login>``, from SO_PEERCRED), named in
``super.users`` so that the tests administer users and ACLs through ``Admin(path=DIR)``
without a password. The SASL listeners' bound ports are read from the broker's INFO line for
each (``broker.json`` records only a PLAINTEXT one).

    broker = SecuredBroker.start(root, "SASL_PLAINTEXT", {"sasl.enabled.mechanisms": "PLAIN"})
    broker.add_user("alice", "alice-secret")
    broker.bootstrap            # "127.0.0.1:PORT" of the SASL listener
"""

from __future__ import annotations

import dataclasses
import getpass
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from spark_mq import Admin, UserScramCredentialUpsertion
from spark_mq.broker.dir_files import Endpoint

#: The principal of the Unix socket's peer: this test run's OS user.
OS_USER = f"User:{getpass.getuser()}"


@dataclasses.dataclass
class SecuredBroker:
    """A broker process serving ``UNIX://`` and one SASL listener (``protocol``)."""

    root: Path
    log_path: Path
    protocol: str
    proc: subprocess.Popen[bytes]
    bootstrap: str = ""

    @classmethod
    def start(
        cls, root: Path, protocol: str, props: Mapping[str, str], *, timeout_s: float = 60
    ) -> SecuredBroker:
        """Starts the broker with ``props`` over an authorizer, the OS user as super user
        and listeners ``UNIX://,{protocol}://127.0.0.1:0``; returns once it serves."""
        settings = {
            "listeners": f"UNIX://,{protocol}://127.0.0.1:0",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": OS_USER,
            **props,
        }
        args = [sys.executable, "-m", "spark_mq.broker", "--log-dir", str(root / "mq")]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        log_path = root / "broker.log"
        with open(log_path, "ab") as err:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        served = cls(root / "mq", log_path, protocol, proc)
        line = re.compile(rf"listener {protocol} on 127\.0\.0\.1:(\d+): clients authenticate")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"broker exited with {proc.returncode}:\n{served.log()}")
            endpoint = Endpoint.read(served.root)
            # The listener lines are logged before broker.json is written.
            if endpoint is not None and endpoint.pid == proc.pid:
                ports = line.findall(served.log())
                assert ports, served.log()
                served.bootstrap = f"127.0.0.1:{ports[-1]}"
                return served
            time.sleep(0.02)
        served.stop()
        raise AssertionError(f"broker did not start:\n{served.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def admin(self) -> Admin:
        """The super user's admin, over the Unix socket."""
        return Admin(path=self.root)

    def add_user(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        with self.admin() as admin:
            admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(user, mechanism, password)]
            )
