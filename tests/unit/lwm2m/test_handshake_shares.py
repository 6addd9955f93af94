"""Handshake slots by source (issue 28 #3): per address, per /24 or /64, and the fair share when all are taken."""

from __future__ import annotations

from devicehub.lwm2m.handshake_shares import HandshakeShares, Refusal, prefix_of


def test_a_prefix_is_the_slash_24_of_ipv4_and_the_slash_64_of_ipv6() -> None:
    assert prefix_of("192.0.2.77") == prefix_of("192.0.2.1") == "192.0.2.0/24"
    assert prefix_of("192.0.3.1") != prefix_of("192.0.2.1")
    assert prefix_of("::ffff:192.0.2.9") == "192.0.2.0/24"  # an IPv4 peer on a dual-stack socket
    assert prefix_of("2001:db8:1:2:aaaa::1") == prefix_of("2001:db8:1:2::9") == "2001:db8:1:2::/64"
    assert prefix_of("2001:db8:1:3::1") != prefix_of("2001:db8:1:2::1")
    assert prefix_of("fe80::1%eth0") == "fe80::/64"
    assert prefix_of("not-an-address") == "not-an-address"


def test_an_address_and_a_prefix_are_refused_once_they_hold_their_share() -> None:
    shares = HandshakeShares(total=100, per_address=2, per_prefix=3)
    shares.add(("192.0.2.1", 1))
    shares.add(("192.0.2.1", 2))
    assert shares.refusal(("192.0.2.1", 3)) is Refusal.ADDRESS
    assert shares.refusal(("192.0.2.2", 1)) is None  # the same network, another address
    shares.add(("192.0.2.2", 1))
    assert shares.refusal(("192.0.2.3", 1)) is Refusal.PREFIX
    assert shares.refusal(("198.51.100.1", 1)) is None
    shares.remove(("192.0.2.1", 1))
    assert shares.refusal(("192.0.2.1", 3)) is None and len(shares) == 2
    shares.remove(("192.0.2.1", 1))  # twice: nothing
    assert len(shares) == 2


def test_when_full_a_newcomer_takes_the_oldest_slot_of_the_largest_holder_only_below_its_level() -> None:
    shares = HandshakeShares(total=4, per_address=10, per_prefix=10)
    for port in (1, 2, 3):
        shares.add(("192.0.2.1", port))
    shares.add(("198.51.100.1", 1))
    assert len(shares) == shares.total
    assert shares.victim(("203.0.113.1", 1)) == ("192.0.2.1", 1)  # 3 held there, 1 here after admission: oldest
    shares.remove(("192.0.2.1", 1))
    shares.add(("203.0.113.1", 1))
    # now 2 / 1 / 1: a fourth network (0 → 1) still takes one of the largest holder's (2 → 1) …
    assert shares.victim(("100.64.0.1", 1)) == ("192.0.2.1", 2)
    shares.remove(("192.0.2.1", 2))
    shares.add(("100.64.0.1", 1))
    # … but at 1 / 1 / 1 / 1 a fifth is refused: equal shares are kept, nobody is churned out
    assert shares.victim(("100.64.1.1", 1)) is None
    # and a network holding slots never takes another's to hold more than it
    assert shares.victim(("192.0.2.9", 1)) is None
