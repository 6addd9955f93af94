"""CoAP response codes as async-response statuses (wire-format.md; RFC 8075 §7 for the rest)."""

from __future__ import annotations

import pytest

from devicehub.domain.device_results import http_status
from devicehub.lwm2m import codes


@pytest.mark.parametrize(
    ("dotted", "status"),
    [
        ("2.01", 201), ("2.02", 200), ("2.04", 200), ("2.05", 200),
        ("4.00", 400), ("4.01", 401), ("4.02", 400), ("4.03", 403), ("4.04", 404), ("4.05", 405),
        ("4.06", 406), ("4.08", 400), ("4.09", 409), ("4.12", 412), ("4.13", 413), ("4.15", 415),
        ("4.22", 422), ("4.29", 429),
        ("5.00", 500), ("5.01", 501), ("5.02", 502), ("5.03", 503), ("5.04", 504), ("5.05", 502),
        ("4.31", 400), ("5.31", 500), ("2.31", 200), ("2.10", 200),  # unknown details: their class's x.00
    ],
)  # fmt: skip
def test_coap_code_maps_to_its_http_status(dotted: str, status: int) -> None:
    klass, detail = dotted.split(".")
    code = int(klass) << 5 | int(detail)
    assert codes.dotted(code) == dotted
    assert http_status(code) == status
