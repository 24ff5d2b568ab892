"""The SCRAM user a SASL LocalCluster's brokers authenticate to each other as.

Kafka's brokers on a SASL inter-broker listener log in to each other with a user whose SCRAM
credential has to be in ZooKeeper before they start (``kafka-configs --zookeeper ...
--alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users --entity-name
broker``). A LocalCluster whose listener is SASL_SSL or SASL_PLAINTEXT does the same for its
brokers: it draws a random password once, writes only the salted credential to
``/config/users/broker`` (:class:`~spark_mq.broker.zk.user_credentials.ZkCredentialBackend`),
and puts the password into each broker's properties file (mode 0600) as
``listener.name.<listener>.scram-sha-512.sasl.jaas.config``. A restarted cluster keeps the
password its properties files already hold.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Final

from spark_mq.broker.listeners import SASL_PROTOCOLS
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.user_credentials import ZkCredentialBackend
from spark_mq.scram import ScramCredential

#: The user name of the brokers (its principal is User:broker; with an authorizer, put it in
#: super.users as Kafka's documentation does).
BROKER_USER: Final = "broker"
MECHANISM: Final = "SCRAM-SHA-512"
_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"


def needs_broker_user(listener_name: str) -> bool:
    """Whether a cluster whose one listener is ``listener_name`` authenticates with SASL."""
    return listener_name.upper() in SASL_PROTOCOLS


def jaas_key(listener_name: str) -> str:
    """Kafka's key of the broker's own credentials on ``listener_name``."""
    return f"listener.name.{listener_name.lower()}.{MECHANISM.lower()}.sasl.jaas.config"


def broker_user_properties(listener_name: str, password: str) -> dict[str, str]:
    """The settings that make a broker log in to the others as :data:`BROKER_USER`."""
    # The password is drawn by new_password (URL-safe characters), so it needs no escaping
    # inside the quotes.
    return {
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        jaas_key(listener_name): f'{_MODULE} required username="{BROKER_USER}" '
        f'password="{password}";',
    }


def password_in(listener_name: str, props: Mapping[str, str]) -> str | None:
    """The broker user's password a properties file already holds (a restart keeps it)."""
    text = props.get(jaas_key(listener_name))
    if not text:
        return None
    _, found, rest = text.partition('password="')
    return rest.partition('"')[0] if found else None


def new_password() -> str:
    return secrets.token_urlsafe(24)


def register_broker_user(zk: ZkClient, password: str) -> None:
    """Write the broker user's salted credential (never the password) to ZooKeeper."""
    credential = ScramCredential.from_password(MECHANISM, password)
    ZkCredentialBackend(zk).write_user(BROKER_USER, {MECHANISM: credential})
