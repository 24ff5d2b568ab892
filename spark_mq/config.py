"""Typed, frozen configuration objects with Kafka's dotted keys.

Each component has one config class: a frozen dataclass whose fields carry units in their
names (``segment_ms``, ``retention_bytes``) and whose metadata holds the user-facing Kafka key
(``segment.ms``), a parser and a check. Values arrive as strings (properties files, Spark
options, the command line) or as Python values (keyword arguments); they are parsed and checked
once, at construction, and a bad one raises :class:`~spark_mq.errors.ConfigError` naming the
key, the value, and what is accepted. An unknown key names the closest valid one.

Example::

    >>> from spark_mq.storage.log_config import LogConfig
    >>> LogConfig.from_properties({"segment.bytes": "1048576", "retention_ms": 60000}).segment_bytes
    1048576
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Self

from spark_mq.errors import ConfigError

#: Kafka uses Long.MAX_VALUE to mean "never" for flush and lag settings; so do we.
LONG_MAX = 2**63 - 1

Parser = Callable[[str, object], Any]
Check = Callable[[str, Any], None]


# ---------------------------------------------------------------------------------------------
# Parsers: turn a string or Python value into the field's type, naming the key on failure.


def parse_int(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise ConfigError(
            f"{key} must be an integer, got the boolean {value!r}", key=key, value=value
        )
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""))
        except ValueError:
            pass
    raise ConfigError(f"{key} must be an integer, got {value!r}", key=key, value=value)


def parse_float(key: str, value: object) -> float:
    if isinstance(value, bool):
        raise ConfigError(
            f"{key} must be a number, got the boolean {value!r}", key=key, value=value
        )
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"{key} must be a number, got {value!r}", key=key, value=value)


def parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(f"{key} must be true or false, got {value!r}", key=key, value=value)


def parse_str(key: str, value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    raise ConfigError(f"{key} must be a string, got {value!r}", key=key, value=value)


def parse_list(key: str, value: object) -> tuple[str, ...]:
    """A comma-separated list (Kafka's LIST type); also accepts any iterable of strings."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, Iterable):
        items = tuple(value)
        if all(isinstance(item, str) for item in items):
            return tuple(item.strip() for item in items)
    raise ConfigError(
        f"{key} must be a comma-separated list of strings, got {value!r}", key=key, value=value
    )


# ---------------------------------------------------------------------------------------------
# Checks: validate a parsed value.


def at_least(minimum: float) -> Check:
    def check(key: str, value: Any) -> None:
        if value < minimum:
            raise ConfigError(
                f"{key} must be at least {minimum}, got {value}", key=key, value=value
            )

    return check


def between(minimum: float, maximum: float) -> Check:
    def check(key: str, value: Any) -> None:
        if not minimum <= value <= maximum:
            raise ConfigError(
                f"{key} must be between {minimum} and {maximum}, got {value}", key=key, value=value
            )

    return check


def one_of(*choices: str) -> Check:
    def check(key: str, value: Any) -> None:
        if value not in choices:
            raise ConfigError(
                f"{key} must be one of {', '.join(choices)}; got {value!r}", key=key, value=value
            )

    return check


def subset_of(*choices: str) -> Check:
    def check(key: str, value: Any) -> None:
        bad = [item for item in value if item not in choices]
        if bad or not value:
            raise ConfigError(
                f"{key} must be a non-empty comma-separated list of {', '.join(choices)}; "
                f"got {','.join(value) or 'nothing'}",
                key=key,
                value=value,
            )

    return check


def unlimited_or_at_least(minimum: int) -> Check:
    """Kafka's convention: -1 means unlimited, otherwise at least ``minimum``."""

    def check(key: str, value: Any) -> None:
        if value != -1 and value < minimum:
            raise ConfigError(
                f"{key} must be -1 (unlimited) or at least {minimum}, got {value}",
                key=key,
                value=value,
            )

    return check


# ---------------------------------------------------------------------------------------------


def setting(
    key: str,
    default: Any,
    doc: str,
    *,
    parse: Parser,
    check: Check | None = None,
) -> Any:
    """Declare a config field: its Kafka key, default, documentation, parser and check."""
    return dataclasses.field(
        default=default,
        metadata={"key": key, "doc": doc, "parse": parse, "check": check},
    )


class Config:
    """Mixin for frozen dataclasses declared with :func:`setting` fields.

    Subclasses are ``@dataclasses.dataclass(frozen=True)``; direct construction with Python
    values is checked in ``__post_init__`` too, so an invalid object can never exist.
    """

    component: ClassVar[str] = "config"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            key = f.metadata["key"]
            value = getattr(self, f.name)
            # Run the parser on direct keyword construction too: without it a string or a
            # wrongly typed value (LogConfig(preallocate="yes")) would slip past the checks or
            # fail them with a TypeError instead of a ConfigError naming the key.
            parse = f.metadata.get("parse")
            if parse is not None:
                value = parse(key, value)
                object.__setattr__(self, f.name, value)
            check = f.metadata.get("check")
            if check is not None:
                check(key, value)

    @classmethod
    def settings(cls) -> dict[str, dataclasses.Field[Any]]:
        """Map of Kafka key to field."""
        return {f.metadata["key"]: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def _field_for(cls, name: str) -> dataclasses.Field[Any]:
        by_key = cls.settings()
        if name in by_key:
            return by_key[name]
        dotted = name.replace("_", ".")
        if dotted in by_key:
            return by_key[dotted]
        for f in by_key.values():
            if f.name == name:
                return f
        close = difflib.get_close_matches(dotted, list(by_key), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"unknown {cls.component} setting {name!r}{hint} "
            f"(valid keys: {', '.join(sorted(by_key))})",
            key=name,
        )

    @classmethod
    def _parse_all(
        cls, props: Mapping[str, object] | None, kwargs: Mapping[str, object]
    ) -> dict[str, Any]:
        """Field name to parsed value; one setting spelled two ways is refused, not merged."""
        values: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for name, raw in [*(props or {}).items(), *kwargs.items()]:
            f = cls._field_for(name)
            key = f.metadata["key"]
            if spelled.setdefault(f.name, name) != name:
                raise ConfigError(
                    f"{key} is given twice, as {spelled[f.name]!r} and {name!r}; give it once",
                    key=key,
                    value=raw,
                )
            values[f.name] = f.metadata["parse"](key, raw)
        return values

    @classmethod
    def from_properties(
        cls, props: Mapping[str, object] | None = None, /, **kwargs: object
    ) -> Self:
        """Build from Kafka keys (``segment.bytes``) or underscore names (``segment_bytes``)."""
        return cls(**cls._parse_all(props, kwargs))

    def with_overrides(
        self, props: Mapping[str, object] | None = None, /, **kwargs: object
    ) -> Self:
        """A copy with some settings replaced (parsed and checked like :meth:`from_properties`)."""
        return dataclasses.replace(self, **self._parse_all(props, kwargs))  # type: ignore[type-var]

    def to_properties(self) -> dict[str, str]:
        """Every setting as Kafka key to string, the form stored on disk and shown to users."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, tuple):
                text = ",".join(value)
            else:
                text = str(value)
            out[f.metadata["key"]] = text
        return out

    def overrides(self) -> dict[str, str]:
        """Only the settings that differ from the defaults."""
        defaults = type(self)().to_properties()
        return {k: v for k, v in self.to_properties().items() if defaults[k] != v}
