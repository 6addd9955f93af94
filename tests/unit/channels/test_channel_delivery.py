"""issue 34 #4: Retry-After values (RFC 9110 §10.2.3), the rate bucket and the "delivery" object's validation."""

from __future__ import annotations

import pytest

from devicehub.channels.delivery import DeliveryOptions, RateLimit, retry_after
from devicehub.errors import ValidationFailed


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("120") == 120.0
    assert retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=784111717.0) == 60.0
    assert retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=784111837.0) == 0.0  # a past date: at once
    for unreadable in (None, "", "soon", "-5", "1.5"):
        assert retry_after(unreadable) is None


def test_the_rate_bucket_holds_one_seconds_worth() -> None:
    bucket = RateLimit(100.0, now=0.0)
    assert bucket.wait(100, now=0.0) == 0.0
    assert bucket.wait(50, now=0.0) == 0.5
    assert bucket.wait(10, now=10.0) == 0.0  # refilled, but never above one second's worth
    assert bucket.wait(100, now=10.0) == 0.1


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], "delivery"),
        ({"colour": 1}, "delivery.colour"),
        ({"retry_after": "yes"}, "delivery.retry_after"),
        ({"max_rate": -1}, "delivery.max_rate"),
        ({"max_rate": True}, "delivery.max_rate"),
        ({"events": []}, "delivery.events"),
        ({"events": ["notifications", "x"]}, "delivery.events"),
        ({"events": [{}]}, "delivery.events"),  # schemathesis found this one a 500
    ],
)
def test_a_bad_delivery_object_names_its_field(raw: object, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        DeliveryOptions.from_wire(raw)
    assert caught.value.fields[0].name == field


def test_the_delivery_object_is_off_by_default() -> None:
    assert DeliveryOptions.from_wire(None) == DeliveryOptions()
    assert DeliveryOptions().kinds is None
    parsed = DeliveryOptions.from_wire({"events": ["registrations", "notifications", "notifications"]})
    assert parsed.events == ["notifications", "registrations"]
