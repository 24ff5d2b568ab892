"""A stopping cluster broker's side of a controlled shutdown (Kafka's
``KafkaServer.controlledShutdown``).

On SIGTERM (or SIGINT), with ``controlled.shutdown.enable`` (the default), a registered
cluster broker, before it stops anything else:

1. stops its replica fetchers, so that it rejoins no ISR while its leaderships move (the
   controller takes it out of the ISRs it is in);
2. sends ControlledShutdown (its broker id and broker epoch) to the controller, found as
   ``membership.controller_id`` with the endpoint of its ``/brokers/ids/<id>`` registration,
   on a connection authenticated with AuthenticateBroker (the controller may be this broker
   itself: its listeners still serve);
3. is done when the controller answers with no error and no partition left to move
   (:mod:`spark_mq.broker.controller.controlled_shutdown`); otherwise (no controller known,
   the connection failed, an error such as STALE_BROKER_EPOCH, or partitions no other
   in-sync replica can take yet) it waits ``controlled.shutdown.retry.backoff.ms`` and asks
   again, ``controlled.shutdown.max.retries`` times in all, and then stops anyway, as Kafka
   does: what it still leads becomes unavailable until the controller sees it gone.

Meanwhile the broker keeps serving: its ex-leaderships answer NOT_LEADER_OR_FOLLOWER and
clients retry on the new leaders.

Threads: :func:`request_controlled_shutdown` blocks; the broker runs it on an executor
thread while its event loop keeps serving.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.errors import ControllerMovedError, SparkMQError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.controller import ControlledShutdownRequest, ControlledShutdownResponse
from spark_mq.protocol.error_codes import ErrorCode

if TYPE_CHECKING:
    from spark_mq.broker.leadership_config import LeadershipConfig
    from spark_mq.broker.zk.membership import ClusterMembership

log = logging.getLogger(__name__)

#: How long one attempt may take, connection and authentication included (Kafka's
#: controller.socket.timeout.ms).
REQUEST_TIMEOUT_S: Final = 30.0


def _controller_address(membership: ClusterMembership) -> tuple[int, BrokerAddress]:
    controller_id = membership.controller_id
    if controller_id is None:
        raise ControllerMovedError("no controller is known")
    # Imported here: only a cluster broker reads registrations.
    from spark_mq.broker.zk.broker_registration import read_live_brokers  # noqa: PLC0415

    found = read_live_brokers(membership.zk).get(controller_id)
    if found is None:
        raise ControllerMovedError(f"controller {controller_id} is not registered")
    return controller_id, membership.inter_broker.address(found[0])


def _attempt(membership: ClusterMembership) -> ControlledShutdownResponse:
    epoch = membership.broker_epoch
    secret = membership.inter_broker_secret
    if epoch is None or secret is None:
        raise ControllerMovedError("this broker is not registered")
    controller_id, address = _controller_address(membership)
    conn = membership.inter_broker.connection(
        address,
        node_id=controller_id,
        client_id=f"controlled-shutdown-{membership.broker_id}",
        connect_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
        request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
    )
    try:
        authenticate_as_broker(
            conn,
            broker_id=membership.broker_id,
            broker_epoch=epoch,
            secret=secret,
            timeout_s=REQUEST_TIMEOUT_S,
        )
        response: ControlledShutdownResponse = conn.request(
            ControlledShutdownRequest(membership.broker_id, epoch), timeout_s=REQUEST_TIMEOUT_S
        )
        return response
    finally:
        conn.close()


def request_controlled_shutdown(
    membership: ClusterMembership,
    config: LeadershipConfig,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Ask the controller to move this broker's leaderships (module docstring); True once it
    has, False if every attempt failed (the broker then stops anyway)."""
    attempts = config.controlled_shutdown_max_retries
    for attempt in range(1, attempts + 1):
        try:
            response = _attempt(membership)
        except (SparkMQError, OSError) as exc:
            why = f"the request failed: {exc}"
        else:
            if response.error_code == ErrorCode.NONE and not response.remaining_partitions:
                log.info("controlled shutdown of broker %d succeeded", membership.broker_id)
                return True
            if response.error_code != ErrorCode.NONE:
                name = ErrorCode(response.error_code).name
                why = f"the controller answered {name}: {response.error_message or name}"
            else:
                left = [f"{p.topic}-{p.partition}" for p in response.remaining_partitions]
                why = f"partitions it still leads, with no other in-sync replica yet: {left[:10]}"
        if attempt < attempts:
            log.warning(
                "controlled shutdown of broker %d, attempt %d of %d, did not finish (%s); "
                "asking again in %d ms",
                membership.broker_id,
                attempt,
                attempts,
                why,
                config.controlled_shutdown_retry_backoff_ms,
            )
            sleep(config.controlled_shutdown_retry_backoff_ms / 1000)
        else:
            log.warning(
                "controlled shutdown of broker %d failed after %d attempts (%s); stopping "
                "anyway: what it still leads is unavailable until the controller sees it gone",
                membership.broker_id,
                attempts,
                why,
            )
    return False
