"""Half messages: SendHalfMessage (1005), EndHalfMessage (1006), CheckHalfMessages (1007)
and ListHalfMessages (1008), answered by the broker's half-message service
(:class:`~spark_mq.broker.half.service.HalfMessageService`; docs/half_messages.md).

Errors escape to the dispatcher, which answers each API's error response: the services
raise typed errors naming what was wrong. An EndHalfMessage that contradicts the recorded
outcome answers INVALID_TXN_STATE with that outcome in ``state``; one of a message the broker
does not know (never sent, or its outcome expired) answers HALF_MESSAGE_NOT_FOUND.
"""

from __future__ import annotations

from spark_mq.broker.context import RequestContext, Response
from spark_mq.errors import InvalidTxnStateError
from spark_mq.protocol.half_messages import (
    CheckHalfMessagesRequest,
    CheckHalfMessagesResponse,
    EndHalfMessageRequest,
    EndHalfMessageResponse,
    ListHalfMessagesRequest,
    ListHalfMessagesResponse,
    SendHalfMessageRequest,
    SendHalfMessageResponse,
)


async def handle_send_half_message(
    ctx: RequestContext, request: SendHalfMessageRequest, _: memoryview
) -> Response:
    partition = await ctx.core.half_messages.send(request)
    return Response(SendHalfMessageResponse(0, partition))


async def handle_end_half_message(
    ctx: RequestContext, request: EndHalfMessageRequest, _: memoryview
) -> Response:
    service = ctx.core.half_messages
    try:
        state, offset = await service.end(request)
    except InvalidTxnStateError as exc:
        known = service.ended.get(request.message_id)
        if known is None:
            raise
        return Response(
            EndHalfMessageResponse(
                exc.error_code, known.state, known.offset, error_message=str(exc)
            )
        )
    return Response(EndHalfMessageResponse(0, state, offset))


async def handle_check_half_messages(
    ctx: RequestContext, request: CheckHalfMessagesRequest, _: memoryview
) -> Response:
    messages = await ctx.core.half_messages.poll_checks(
        request.producer_group, request.max_wait_ms, request.max_messages
    )
    return Response(CheckHalfMessagesResponse(0, messages))


async def handle_list_half_messages(
    ctx: RequestContext, request: ListHalfMessagesRequest, _: memoryview
) -> Response:
    service = ctx.core.half_messages
    messages = await service.list(discarded=request.discarded, group=request.producer_group)
    return Response(ListHalfMessagesResponse(0, messages, service.discarded_total()))
