"""An error raised after the response began: no error response can follow it on the connection.

A WebSocket route's error after its upgrade, answered with the edge's error response, had aiohttp write it into the
frame stream, where the client read "HTTP/1.1 503" as a frame header ('H' = 0x48: RSV1 set) and failed the connection
(RFC 6455 §5.2): the cause of test_cluster_front's intermittent "non-zero reserved bits". Routes upgrade through
`upgrade`, and the edge ends such an error with a close frame (`answered_in_stream`). A streamed body already under way
(an image download whose store read fails half-way) is cut instead: the error is raised again to aiohttp, which
drops the connection once bytes of the response were sent (its `handle_error`), so the client sees a short body
rather than a second response inside the first.
"""

from __future__ import annotations

import logging

from aiohttp import WSCloseCode, web

from devicehub.errors import DevicehubError

log = logging.getLogger("devicehub.api")

# the request's prepared WebSocket, once its 101 is written
_UPGRADED = web.RequestKey("devicehub.upgraded", web.WebSocketResponse)
_REASON_BYTES = 123  # RFC 6455 §5.5: a control frame's payload is at most 125 bytes, two of them the code


async def upgrade(request: web.Request, ws: web.WebSocketResponse) -> None:
    """Write the 101 and note the socket on the request: from here an error ends it with a close frame."""
    await ws.prepare(request)
    request[_UPGRADED] = ws


async def answered_in_stream(request: web.Request, error: Exception) -> web.WebSocketResponse | None:
    """The request's WebSocket, closed 1011 with the error's token and message, when it was upgraded; None when no
    response began (the error is answered as one). The error itself when the response's bytes are on their way."""
    ws: web.WebSocketResponse | None = request.get(_UPGRADED)
    if ws is None:
        if request.writer.output_size > 0:
            raise error
        return None
    if isinstance(error, DevicehubError):
        log.info("websocket %s ended after its upgrade: %s %s", request.path, error.token, error.message)
        reason = f"{error.token}: {error.message}".encode()[:_REASON_BYTES]
    else:
        log.error("unhandled error on websocket %s after its upgrade", request.path, exc_info=error)
        reason = b"INTERNAL_ERROR"
    if not ws.closed:
        await ws.close(code=WSCloseCode.INTERNAL_ERROR, message=reason)  # spec §7: 1011, with a reason
    return ws
