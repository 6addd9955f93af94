"""Records stored in an earlier encoding are read into today's model (store/record_upgrades.py, which both backends
decode with)."""

from __future__ import annotations

import msgspec
import pytest

from devicehub.domain.model import Registration, ResourceLink
from devicehub.store.record_upgrades import decode

# a registration record as stored before issue 29 #3: each link an array (path, rt, ct, obs, iface, aobs)
EARLIER = msgspec.msgpack.encode(
    {
        "device_id": "d" * 32,
        "account_id": "a" * 32,
        "endpoint_name": "ep-1",
        "lifetime": 60,
        "links": [["/3/0", None, None, False, None, None], ["/3303/0/5700", "t", 42, True, "s", 7]],
        "host": "127.0.0.1",
        "port": 5683,
        "registered_at": 1.0,
        "updated_at": 2.0,
        "expires_at": 3.0,
    }
)


def test_a_registration_record_with_array_links_reads_as_today_s_links() -> None:
    record = decode(Registration, EARLIER)
    assert record.links == (ResourceLink("/3/0"), ResourceLink("/3303/0/5700", "t", 42, True, "s", aobs=7))
    assert (record.endpoint_name, record.port) == ("ep-1", 5683)


def test_a_record_that_is_not_an_earlier_encoding_is_still_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(Registration, msgspec.msgpack.encode({"links": "nonsense"}))


def test_today_s_registration_record_round_trips() -> None:
    record = msgspec.msgpack.decode(EARLIER)
    record["links"] = [{"path": "/3/0"}]
    data = msgspec.msgpack.encode(msgspec.convert(record, Registration))
    assert decode(Registration, data).links == (ResourceLink("/3/0"),)
