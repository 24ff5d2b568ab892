"""An entity's config znode (``/config/<type>/<name>``), read and changed as Kafka's
AdminZkClient changes it: the one write path of SCRAM credentials
(:mod:`~spark_mq.broker.zk.user_credentials`) and client quotas
(:mod:`~spark_mq.broker.zk.client_quotas`), which share ``/config/users/<u>``.

A znode holds ``{"version":1,"config":{...}}``. :func:`alter_entity_config` reads it, lets the
caller compute the new config from the current one (keeping the keys it does not own), then
commits in one multi-op the new config at the version read (a compare-and-set: two brokers
altering one entity at once cannot lose each other's change; the loser reads again) and the
change notification ``/config/changes/config_change_<n>`` that tells every broker to read the
entity again (:class:`~spark_mq.broker.zk.config_changes.TopicConfigSync`). Kafka writes the
two apart; one multi-op means a notification never announces a change that was not written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_mq.errors import ClusterError, CorruptZnodeError

from . import znodes
from .cas_retry import MAX_WRITE_ATTEMPTS, write_attempts
from .client import ZkClient, translate_errors


def decode_config(path: str, data: bytes | None) -> dict[str, Any]:
    """The ``config`` object of an entity znode's data (CorruptZnodeError if it is not one)."""
    try:
        obj = json.loads((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptZnodeError(f"znode {path} does not hold JSON ({exc})", path=path) from exc
    config = obj.get("config") if isinstance(obj, dict) else None
    if not isinstance(config, dict):
        raise CorruptZnodeError(f"znode {path}: field 'config' must be an object", path=path)
    return config


def encode_config(config: dict[str, Any]) -> bytes:
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()


def alter_entity_config(
    zk: ZkClient,
    path: str,
    notification: bytes,
    change: Callable[[dict[str, Any] | None], dict[str, Any]],
    what: str,
) -> None:
    """Set the config of znode ``path`` to ``change(current)`` (``None``: no znode yet; an
    empty znode reads as ``{}``) together with ``notification``, retrying a lost race.
    ``change`` may be called once per attempt. ClusterError (naming ``what``) when ZooKeeper
    refuses the write for another reason or the race is lost :data:`MAX_WRITE_ATTEMPTS`
    times."""
    for _attempt in write_attempts():
        found = zk.get(path)
        current = None if found is None else decode_config(path, found[0]) if found[0] else {}
        data = encode_config(change(current))
        with translate_errors(what):
            txn = zk.kazoo.transaction()
            if found is None:
                txn.create(path, data)
            else:
                txn.set_data(path, data, found[1].version)
            txn.create(
                znodes.config_change_path(znodes.CONFIG_CHANGE_PREFIX), notification, sequence=True
            )
            results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return
        if not any(
            isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in failures
        ):
            raise ClusterError(f"{what} failed in ZooKeeper: {failures}")
    raise ClusterError(f"{what}: {MAX_WRITE_ATTEMPTS} attempts lost a race with other writers")
