"""The authorizer's settings (``ServerConfig.authorizer``): Kafka's keys.

Off by default: with no ``authorizer.class.name`` every principal may do everything, as
before ACLs existed. With it, a request is allowed only if an ACL allows it (or the
principal is in ``super.users``, or no ACL names the resource and
``allow.everyone.if.no.acl.found`` is true).

    >>> c = AuthorizerConfig.from_properties({
    ...     "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    ...     "super.users": "User:admin;User:ops"})
    >>> c.enabled, sorted(c.super_principals)
    (True, ['User:admin', 'User:ops'])
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from spark_mq.config import Config, parse_bool, parse_str, setting
from spark_mq.errors import ConfigError
from spark_mq.principal import KafkaPrincipal

#: The class names that turn the authorizer on: Kafka's (ZooKeeper-era and KRaft-era
#: names, so a copied server.properties works) and spark_mq's own.
AUTHORIZER_NAMES: Final = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "spark_mq.AclAuthorizer",
    }
)


def _check_class(key: str, value: Any) -> None:
    if value and value not in AUTHORIZER_NAMES:
        raise ConfigError(
            f"{key} {value!r} is not an authorizer spark_mq has: use "
            "kafka.security.authorizer.AclAuthorizer (or spark_mq.AclAuthorizer), or leave it "
            "empty for no authorization",
            key=key,
            value=value,
        )


def split_super_users(key: str, value: str) -> tuple[str, ...]:
    """Kafka's ``super.users``: principals separated by semicolons (a DN holds commas)."""
    items = [part.strip() for part in value.split(";") if part.strip()]
    return tuple(str(KafkaPrincipal.parse(item, key=key)) for item in items)


def _check_super_users(key: str, value: Any) -> None:
    split_super_users(key, value)


@dataclasses.dataclass(frozen=True)
class AuthorizerConfig(Config):
    """ACL authorization (``authorizer.class.name``, ``super.users``,
    ``allow.everyone.if.no.acl.found``)."""

    component = "authorizer"

    authorizer_class_name: str = setting(
        "authorizer.class.name",
        "",
        "The authorizer: kafka.security.authorizer.AclAuthorizer (or spark_mq.AclAuthorizer) "
        "checks every request against the ACLs (spark-mq acls); empty (the default) allows "
        "everything.",
        parse=parse_str,
        check=_check_class,
    )
    #: As written (``;``-separated); :attr:`super_principals` is the parsed set.
    super_users: str = setting(
        "super.users",
        "",
        "Principals allowed everything whatever the ACLs say, separated by ';' "
        "(User:admin;User:ops).",
        parse=parse_str,
        check=_check_super_users,
    )
    allow_everyone_if_no_acl_found: bool = setting(
        "allow.everyone.if.no.acl.found",
        False,
        "Allow every principal on a resource that no ACL names (Kafka's default: false, deny).",
        parse=parse_bool,
    )

    @property
    def enabled(self) -> bool:
        return bool(self.authorizer_class_name)

    @property
    def super_principals(self) -> frozenset[str]:
        return frozenset(split_super_users("super.users", self.super_users))

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings
