"""``--command-config FILE``: the client settings a command's clients connect with (Kafka's
tools' option of the same name), as a Java ``.properties`` file.

    security.protocol=SASL_SSL
    ssl.truststore.location=/etc/mq/ca.pem
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="admin" password="secret";

Every key is checked when the file is read, against the settings of the producer, the consumer
and the admin client, so a misspelt key or a bad value is refused before any connection is
made, with the file and the line that holds it. One file may serve every command (as Kafka's
``client.properties`` does): each client the command opens takes the keys it knows and leaves
the others (``linger.ms`` goes to a producer, not to an admin client).

>>> settings = parse_command_config("security.protocol=SSL\\n# a comment\\nlinger.ms=5\\n", "f")
>>> settings.for_client(AdminConfig)
{'security.protocol': 'SSL'}
>>> settings.for_client(ProducerConfig)
{'security.protocol': 'SSL', 'linger.ms': '5'}
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from spark_mq.broker.properties_file import parse_properties
from spark_mq.client.config import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig
from spark_mq.errors import ConfigError

#: The clients a command may open; a key of the file must be a setting of at least one.
CLIENT_CONFIGS: Final[tuple[type[ClientConfig], ...]] = (
    ProducerConfig,
    ConsumerConfig,
    AdminConfig,
)

#: Where the broker is comes from ``--bootstrap-server`` (or ``--path``), never from the file:
#: two places naming the broker would leave the reader guessing which one is used.
ENDPOINT_KEYS: Final = frozenset({"bootstrap.servers", "path"})


@dataclasses.dataclass(frozen=True)
class CommandConfig:
    """The settings of one ``--command-config`` file, Kafka key to text as written."""

    source: str
    settings: dict[str, str]

    def for_client(self, config_class: type[ClientConfig]) -> dict[str, str]:
        """The settings a client of ``config_class`` takes (the others are for other clients)."""
        known = config_class.settings()
        return {key: value for key, value in self.settings.items() if key in known}


def read_command_config(path: str | os.PathLike[str]) -> CommandConfig:
    """Read and check a ``--command-config`` file; every error names the file (and line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read --command-config {path}: {exc.strerror or exc}",
            key="--command-config",
            value=str(path),
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"--command-config {path} is not UTF-8 text: {exc}",
            key="--command-config",
            value=str(path),
        ) from exc
    return parse_command_config(text, str(path))


def parse_command_config(text: str, source: str) -> CommandConfig:
    """Parse the text of a ``--command-config`` file called ``source`` (see the module doc)."""
    settings: dict[str, str] = {}
    for number, chunk in _logical_lines(text):
        where = f"--command-config {source}, line {number}"
        try:
            parsed = parse_properties(chunk, source=where)
        except ConfigError as exc:
            # The parser refuses only a line with a value but no key; it counts lines from the
            # chunk it was given, so the message is rebuilt with the file's line number.
            raise ConfigError(
                f"{where} has a value but no key: {chunk!r}; write each setting as key=value",
                key="--command-config",
            ) from exc
        for key, value in parsed.items():
            _check(key, value, where)
            settings[key] = value
    return CommandConfig(source, settings)


def _check(key: str, value: str, where: str) -> None:
    """Refuse a key no client takes, the endpoint keys and a value its client refuses."""
    if key in ENDPOINT_KEYS:
        raise ConfigError(
            f"{where}: {key} does not belong in the file; say where the broker is with "
            "--bootstrap-server HOST:PORT (or --path DIR)",
            key=key,
            value=value,
        )
    owners = [c for c in CLIENT_CONFIGS if key in c.settings()]
    if not owners:
        raise ConfigError(
            f"{where}: unknown client setting {key!r}{_hint(key)}; the file holds the "
            "producer's, consumer's and admin client's settings with Kafka's keys "
            "(docs/clients.md lists them)",
            key=key,
            value=value,
        )
    # The value is checked on its own (the field's parser and check), not by building a whole
    # config: a rule between two keys (acks=1 needs enable.idempotence=false) is the client's
    # to apply to all the settings it ends up with.
    field = owners[0].settings()[key]
    try:
        parsed = field.metadata["parse"](key, value)
        check = field.metadata.get("check")
        if check is not None:
            check(key, parsed)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}", key=key, value=value) from exc


def _hint(key: str) -> str:
    known = sorted({k for c in CLIENT_CONFIGS for k in c.settings()})
    close = difflib.get_close_matches(key.replace("_", "."), known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Each setting's text with the number of the line it starts on; a line ending in an odd
    number of backslashes goes on on the next one, as in Java."""
    start = 0
    chunk: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not chunk:
            start = number
        chunk.append(line)
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            continue
        yield start, "\n".join(chunk)
        chunk = []
    if chunk:
        yield start, "\n".join(chunk)
