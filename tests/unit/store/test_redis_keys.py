"""The key layout (store/redis/keys.py, issue 31 #2): what one write touches shares a hash tag, so one cluster slot;
a global index spreads over buckets of their own slots."""

from __future__ import annotations

from redis.crc import key_slot

from devicehub.store.redis.keys import BUCKETS, Keys

K = Keys("devicehub:")


def slot(key: str) -> int:
    return key_slot(key.encode())


def test_every_key_of_a_device_an_account_an_api_key_or_a_name_lies_in_one_slot() -> None:
    # ids and names are untrusted: a `}` or `{` inside them still gives every key of theirs the same tag
    for device in ("d1", "a" * 32, "we}ird{id"):
        kinds = (
            "device",
            "device_dir",
            "reqs",
            "subscribers",
            "snap_paths",
            "snap_rep",
            "snap_des",
            "snap_sub",
            "reg",
            "reg_obs",
        )
        assert len({slot(K.dev(kind, device)) for kind in kinds}) == 1
    for account in ("a" * 32, "x}y"):
        keys = [K.acc("devices", account), K.acc("devices", account, "registered"), K.acc("devix", account)]
        keys += [K.acc("devices_by", account, "host_gateway", "g:1"), K.acc("keys", account), K.acc("account", account)]
        assert len({slot(k) for k in keys}) == 1
    assert len({slot(K.key(kind, "k" * 32)) for kind in ("channel", "events", "drops", "inbox", "presub")}) == 1
    assert len({slot(K.ep(kind, "ep:1/x")) for kind in ("enroll", "psk", "psk_account", "bootstrap", "device_ep")}) == 1


def test_a_global_index_is_at_least_16_buckets_each_its_own_key_and_a_member_always_in_the_same() -> None:
    buckets = K.buckets("seen")
    assert len(set(buckets)) == BUCKETS >= 16
    assert len({slot(b) for b in buckets}) == BUCKETS  # spread: no two buckets share a slot
    assert {K.bucket("seen", f"d{n}") for n in range(1000)} == set(buckets)
    assert K.bucket("seen", "d7") == K.bucket("seen", "d7")


def test_the_keys_of_many_devices_are_each_devices_key() -> None:
    ids = ["d1", "a" * 32, "we}ird{id"]
    assert K.devs("device_dir", ids) == [K.dev("device_dir", i) for i in ids]
    assert K.devs("device", []) == []
