"""Who a connection is: Kafka's ``KafkaPrincipal`` (``User:alice``).

A broker connection starts as :data:`ANONYMOUS` (Kafka's ``User:ANONYMOUS``). Authentication
replaces it: SASL with the user it proved (``User:<name>``, kept for the connection's life: a
SASL re-authentication, with ``connections.max.reauth.ms``, must prove the same user or the
connection is closed), TLS with client authentication
with the certificate's distinguished name (``User:CN=client,O=org``), the inter-broker secret
with what it proves, and the embedded broker's token (SCRAM with ``tokenauth=true`` on its
token listener, ``broker/embedded_token.py``) with the token's owner (``User:<OS user>``),
as Kafka's delegation tokens do. Authorization (ACLs, ``super.users``) and client quotas
(the principal's name is the quota's user) read it from the connection's session.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from spark_mq.errors import ConfigError

#: Kafka's only principal type for users.
USER_TYPE: Final = "User"


@dataclasses.dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal as Kafka writes it: ``<type>:<name>``."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: str, *, key: str = "principal") -> KafkaPrincipal:
        """``User:alice`` (the name may itself hold colons, as a DN's values may)."""
        kind, sep, name = text.strip().partition(":")
        if not sep or not kind or not name:
            raise ConfigError(
                f"{key} {text!r} is not a principal: write it as Kafka does, User:<name>",
                key=key,
                value=text,
            )
        return cls(kind, name)


#: The principal of a connection that has not authenticated.
ANONYMOUS: Final = KafkaPrincipal.user("ANONYMOUS")
