"""CoAP numbers devicehub uses (RFC 7252 §12, RFC 7641, RFC 7959): message types, codes, option numbers."""

from __future__ import annotations

CON, NON, ACK, RST = 0, 1, 2, 3

EMPTY = 0x00
GET, POST, PUT, DELETE, FETCH, PATCH, IPATCH = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07
METHODS = {"GET": GET, "POST": POST, "PUT": PUT, "DELETE": DELETE}

CREATED, DELETED, VALID, CHANGED, CONTENT, CONTINUE = 0x41, 0x42, 0x43, 0x44, 0x45, 0x5F
BAD_REQUEST, UNAUTHORIZED, BAD_OPTION, FORBIDDEN, NOT_FOUND, METHOD_NOT_ALLOWED = 0x80, 0x81, 0x82, 0x83, 0x84, 0x85
NOT_ACCEPTABLE, REQUEST_INCOMPLETE, CONFLICT, PRECONDITION_FAILED, ENTITY_TOO_LARGE = 0x86, 0x88, 0x89, 0x8C, 0x8D
UNSUPPORTED_FORMAT, UNPROCESSABLE, TOO_MANY_REQUESTS = 0x8F, 0x96, 0x9D
INTERNAL_ERROR, NOT_IMPLEMENTED, BAD_GATEWAY, SERVICE_UNAVAILABLE, GATEWAY_TIMEOUT = 0xA0, 0xA1, 0xA2, 0xA3, 0xA4
PROXYING_NOT_SUPPORTED = 0xA5

IF_MATCH = 1
URI_HOST = 3
ETAG = 4
IF_NONE_MATCH = 5
OBSERVE = 6
URI_PORT = 7
LOCATION_PATH = 8
URI_PATH = 11
CONTENT_FORMAT = 12
MAX_AGE = 14
URI_QUERY = 15
ACCEPT = 17
LOCATION_QUERY = 20
BLOCK2 = 23
BLOCK1 = 27
SIZE2 = 28
PROXY_URI = 35
PROXY_SCHEME = 39
SIZE1 = 60

# RFC 7252 §5.4.1: which critical options this endpoint acts on is the codec's RECOGNISED_CRITICAL
# (rust/codec/src/coap/options.rs); `CoapMessage.unrecognised_critical` names the first other one.


def is_request(code: int) -> bool:
    return 0x01 <= code <= 0x1F


def is_response(code: int) -> bool:
    return code >= 0x40


def dotted(code: int) -> str:
    return f"{code >> 5}.{code & 0x1F:02d}"


def path_options(path: str) -> list[tuple[int, bytes]]:
    """Uri-Path options of an absolute path ("/3/0/1" → three options)."""
    return [(URI_PATH, segment.encode()) for segment in path.split("/") if segment]


def query_options(query: str) -> list[tuple[int, bytes]]:
    """Uri-Query options, one per `&`-separated item (RFC 7252 §6.5)."""
    return [(URI_QUERY, item.encode()) for item in query.split("&") if item]
