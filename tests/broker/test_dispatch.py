"""Errors are answered once, by the dispatcher (``handlers.errors.answer``): a typed error
becomes its code in the API's error response; a bug is logged with its traceback and
answered UNKNOWN_SERVER_ERROR, which a client does not retry. The bugs are injected into
real parts of a broker core on a temporary directory (a coordinator method, the offsets
topic's append), the way a bug there would surface.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.group.coordinator import GroupCoordinator
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import UnanswerableError, answer
from spark_mq.protocol import group_offsets as go
from spark_mq.protocol import groups as gp
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.error_codes import ErrorCode, exception_class
from spark_mq.protocol.framing import RequestHeader
from spark_mq.protocol.metadata import MetadataRequest
from spark_mq.storage.log_manager import LogManager


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    root = tmp_path / "mq"
    logs = LogManager(root)
    config = ServerConfig.from_properties(
        {"log.dirs": str(root), "offsets.topic.num.partitions": "1"}
    )
    core = BrokerCore(config, logs, BrokerMeta.take_over(root))
    yield core
    core.groups.close()
    core.close()
    logs.close()


async def dispatch(core: BrokerCore, request: Any) -> Any:
    spec = spec_for_request(request)
    header = RequestHeader(spec.key, 0, 1, "test")
    ctx = RequestContext(core, header, BrokerAddress("127.0.0.1", 9092), "peer:1")
    response = await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(b""))
    assert response is not None
    return response.body


def test_a_bug_is_answered_unknown_server_error_with_its_traceback_logged(
    core: BrokerCore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_heartbeat(*_: object, **__: object) -> None:
        raise KeyError("a member the coordinator lost track of")

    monkeypatch.setattr(GroupCoordinator, "heartbeat", broken_heartbeat)
    with caplog.at_level(logging.ERROR, logger="spark_mq.broker.handlers"):
        answered = asyncio.run(dispatch(core, gp.HeartbeatRequest("g", 1, "m")))
    assert isinstance(answered, gp.HeartbeatResponse)
    assert answered.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "HEARTBEAT failed on the broker (KeyError" in (answered.error_message or "")
    assert not exception_class(answered.error_code).retriable
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[0] is KeyError]
    assert logged, "the bug's traceback is in the broker's log"


def test_a_typed_error_is_answered_with_its_code(core: BrokerCore) -> None:
    answered = asyncio.run(dispatch(core, gp.HeartbeatRequest("g", 1, "nobody")))
    assert answered.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_bug_writing_offsets_is_not_answered_retriable(
    core: BrokerCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group coordinator used to turn any failure of its append, a bug included, into
    COORDINATOR_NOT_AVAILABLE, which a client retries until its timeout."""

    def broken_append(*_: object, **__: object) -> None:
        raise TypeError("bad record layout")

    core.logs.create_topic("t", 2)
    monkeypatch.setattr(core.groups.topic, "append", broken_append)
    topics = [
        go.OffsetCommitTopic("t", [go.OffsetCommitPartition(0, 5), go.OffsetCommitPartition(1, 7)])
    ]
    answered = asyncio.run(dispatch(core, go.OffsetCommitRequest("g", topics)))
    codes = [p.error_code for t in answered.topics for p in t.partitions]
    assert codes == [ErrorCode.UNKNOWN_SERVER_ERROR] * 2


def test_a_disk_failure_writing_offsets_stays_retriable(
    core: BrokerCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    core.logs.create_topic("t", 1)
    monkeypatch.setattr(core.groups.topic, "append", full_disk)
    topics = [go.OffsetCommitTopic("t", [go.OffsetCommitPartition(0, 5)])]
    answered = asyncio.run(dispatch(core, go.OffsetCommitRequest("g", topics)))
    (code,) = [p.error_code for t in answered.topics for p in t.partitions]
    assert code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert exception_class(code).retriable


def test_a_failure_the_response_cannot_carry_goes_to_the_connection(
    core: BrokerCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_list(*_: object, **__: object) -> None:
        raise RuntimeError("listing broke")

    monkeypatch.setattr(core.logs, "list_topics", broken_list)
    with pytest.raises(UnanswerableError) as caught:
        asyncio.run(dispatch(core, MetadataRequest(topics=None)))
    assert caught.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
