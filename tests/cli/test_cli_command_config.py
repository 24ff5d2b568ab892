"""``--command-config FILE`` and ``-X KEY=VALUE`` (spark_mq/cli/command_config.py,
cli/common.py) against a real broker with PLAINTEXT, SSL and SASL_PLAINTEXT listeners (its
BrokerServer on an event loop thread, certificates from a CA made in the test): ``topics
list`` works over SASL and over SSL with the file, is refused with a clear message with a wrong
password or an untrusted CA, and a file that cannot be used (unreadable, a bad line, an unknown
key, a bad value) is a usage error naming the file and the line before any connection is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import InProcessBroker
from tls_certs import BrokerPki

from spark_mq import Admin, UserScramCredentialUpsertion
from spark_mq.cli.command_config import parse_command_config
from spark_mq.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from spark_mq.errors import ConfigError

EXIT_ERROR = 1
EXIT_USAGE = 2
TOPIC = "secured-topic"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> BrokerPki:
    return BrokerPki.create(tmp_path_factory.mktemp("cli-pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: BrokerPki) -> Iterator[InProcessBroker]:
    root = tmp_path_factory.mktemp("cli-secured")
    served = InProcessBroker(root, pki.broker.cert, pki.broker.key)
    with Admin(bootstrap_servers=served.plain) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", "SCRAM-SHA-512", "carol-secret")]
        )
        admin.create_topic(TOPIC, 1)
    yield served
    served.close()


def sasl_file(tmp_path: Path, password: str) -> Path:
    """A client.properties as a Kafka user writes it: the JAAS line continued on the next one,
    a comment, and a producer setting the admin client of ``topics list`` leaves alone."""
    path = tmp_path / "sasl.properties"
    path.write_text(
        "# carol on the SASL listener\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="carol" password="{password}";\n'
        "linger.ms=5\n"
    )
    return path


def ssl_file(tmp_path: Path, ca: Path) -> Path:
    path = tmp_path / "ssl.properties"
    path.write_text(f"security.protocol=SSL\nssl.ca.location={ca}\n")
    return path


def listed(cli: Any, servers: str, *extra: str) -> Any:
    return cli("topics", "list", "--bootstrap-server", servers, "--json", *extra)


def test_topics_list_over_sasl(cli: Any, broker: InProcessBroker, tmp_path: Path) -> None:
    good = listed(cli, broker.sasl, "--command-config", str(sasl_file(tmp_path, "carol-secret")))
    assert good.code == 0, good.err
    assert TOPIC in good.out


def test_topics_list_over_ssl(
    cli: Any, broker: InProcessBroker, pki: BrokerPki, tmp_path: Path
) -> None:
    good = listed(cli, broker.ssl, "--command-config", str(ssl_file(tmp_path, pki.ca)))
    assert good.code == 0, good.err
    assert TOPIC in good.out


def test_wrong_password_and_untrusted_ca_are_refused_clearly(
    cli: Any, broker: InProcessBroker, pki: BrokerPki, tmp_path: Path
) -> None:
    wrong = listed(cli, broker.sasl, "--command-config", str(sasl_file(tmp_path, "not-hers")))
    assert wrong.code == EXIT_ERROR
    assert "carol" in wrong.err and "SCRAM-SHA-512" in wrong.err, wrong.err
    assert "Traceback" not in wrong.err and "not-hers" not in wrong.err

    untrusted = listed(cli, broker.ssl, "--command-config", str(ssl_file(tmp_path, pki.other_ca)))
    assert untrusted.code == EXIT_ERROR
    assert "CA this side does not trust" in untrusted.err and broker.ssl in untrusted.err


def test_property_wins_over_the_file(cli: Any, broker: InProcessBroker, tmp_path: Path) -> None:
    config = str(sasl_file(tmp_path, "not-hers"))
    jaas = (
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="carol" password="carol-secret";'
    )
    fixed = listed(cli, broker.sasl, "--command-config", config, "-X", jaas)
    assert fixed.code == 0, fixed.err
    assert TOPIC in fixed.out


def test_a_file_that_cannot_be_used_names_file_and_line(cli: Any, tmp_path: Path) -> None:
    # The broker address is never reached: each file is refused before a connection is made.
    nowhere = "127.0.0.1:1"
    missing = tmp_path / "absent.properties"
    gone = listed(cli, nowhere, "--command-config", str(missing))
    assert gone.code == EXIT_USAGE and f"cannot read --command-config {missing}" in gone.err

    cases = {
        "security.protocol=SSL\n\nsecurity.protocl=SSL\n": ("line 3", "did you mean"),
        "# x\nsecurity.protocol=TLS\n": ("line 2", "PLAINTEXT, SSL, SASL_PLAINTEXT"),
        "security.protocol=SSL\n=orphan\n": ("line 2", "no key"),
        "request.timeout.ms=soon\n": ("line 1", "must be an integer"),
        "bootstrap.servers=h:1\n": ("line 1", "--bootstrap-server"),
    }
    for text, (line, why) in cases.items():
        path = tmp_path / "bad.properties"
        path.write_text(text)
        refused = listed(cli, nowhere, "--command-config", str(path))
        assert refused.code == EXIT_USAGE, (text, refused.err)
        assert f"--command-config {path}, {line}" in refused.err and why in refused.err, (
            text,
            refused.err,
        )


def test_each_client_takes_the_keys_it_knows() -> None:
    settings = parse_command_config(
        "security.protocol=SSL\nlinger.ms=5\nmax.poll.records=7\n"
        "sasl.jaas.config=a \\\n  b\nrequest.timeout.ms=9000\n",
        "f",
    )
    assert settings.for_client(AdminConfig) == {
        "security.protocol": "SSL",
        "sasl.jaas.config": "a b",
        "request.timeout.ms": "9000",
    }
    assert set(settings.for_client(ProducerConfig)) == {
        "security.protocol",
        "linger.ms",
        "sasl.jaas.config",
        "request.timeout.ms",
    }
    assert "max.poll.records" in settings.for_client(ConsumerConfig)
    with pytest.raises(ConfigError, match="f, line 6"):
        parse_command_config("linger.ms=1\\\n2\\\n3\n\nacks=1\nno.such.key=2", "f")
