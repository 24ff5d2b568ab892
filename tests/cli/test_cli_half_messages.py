"""``spark-mq half-messages list`` on the session's local broker: a half message whose
listener answers UNKNOWN is listed as pending with its group, topic and key; a group with
none lists nothing; --discarded lists the discarded ones (none on this broker: discards
are covered by tests/integration/test_half_messages.py with short check intervals)."""

from __future__ import annotations

import json
from typing import Any

from spark_mq import LocalTransactionState, TransactionalMessage, TransactionalMessageProducer


class Unsure:
    def execute_local_transaction(
        self, message: TransactionalMessage, arg: object
    ) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, message: TransactionalMessage) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


def test_list_pending_and_discarded(cli: Any, mq_path: str, topic: str) -> None:
    group = f"cli-group-{topic}"
    # No check for an hour: the message stays pending, with no check counted.
    with TransactionalMessageProducer(
        mq_path, producer_group=group, listener=Unsure(), check_immunity_ms=3_600_000
    ) as producer:
        sent = producer.send(topic, b"value", key=b"order-7")
    assert sent.state is LocalTransactionState.UNKNOWN and sent.offset == -1

    listed = cli("half-messages", "list", "--path", mq_path, "--producer-group", group, "--json")
    assert listed.code == 0, listed.err
    (row,) = json.loads(listed.out)["messages"]
    assert (row["message_id"], row["topic"], row["key"]) == (sent.message_id, topic, "order-7")
    assert (row["state"], row["check_count"]) == ("PENDING", 0)

    table = cli("half-messages", "list", "--path", mq_path, "--producer-group", group)
    assert sent.message_id in table.out and f"{topic}-{sent.partition}" in table.out

    none = cli("half-messages", "list", "--path", mq_path, "--producer-group", "nobody")
    assert none.out.strip() == "No pending half messages."
    discarded = cli("half-messages", "list", "--path", mq_path, "--discarded")
    assert discarded.code == 0, discarded.err
    assert "No discarded half messages." in discarded.out
