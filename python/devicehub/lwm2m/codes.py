"""CoAP numbers devicehub uses (RFC 7252 §12, RFC 7641, RFC 7959): message types, codes, option numbers."""

from __future__ import annotations

CON, NON, ACK, RST = 0, 1, 2, 3

EMPTY = 0x00
GET, POST, PUT, DELETE, FETCH, PATCH, IPATCH = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07
METHODS = {"GET": GET, "POST": POST, "PUT": PUT, "DELETE": DELETE}

CREATED, DELETED, VALID, CHANGED, CONTENT, CONTINUE = 0x41, 0x42, 0x43, 0x44, 0x45, 0x5F
BAD_REQUEST, UNAUTHORIZED, BAD_OPTION, FORBIDDEN, NOT_FOUND, METHOD_NOT_ALLOWED = 0x80, 0x81, 0x82, 0x83, 0x84, 0x85
NOT_ACCEPTABLE, REQUEST_INCOMPLETE, PRECONDITION_FAILED, ENTITY_TOO_LARGE = 0x86, 0x88, 0x8C, 0x8D
UNSUPPORTED_FORMAT, INTERNAL_ERROR, SERVICE_UNAVAILABLE = 0x8F, 0xA0, 0xA3

OBSERVE = 6
LOCATION_PATH = 8
URI_PATH = 11
CONTENT_FORMAT = 12
MAX_AGE = 14
URI_QUERY = 15
ACCEPT = 17
BLOCK2 = 23
BLOCK1 = 27
SIZE2 = 28
SIZE1 = 60


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
