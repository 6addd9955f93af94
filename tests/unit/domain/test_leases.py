"""Who may take or end a named lease: the rule both stores decide with (domain/storage/leases.py)."""

from __future__ import annotations

from devicehub.domain.storage.leases import Lease, may_release, may_take


def test_a_lease_nobody_holds_may_be_taken() -> None:
    assert may_take(None, "node-a", now=100.0)


def test_the_owner_may_renew_its_lease_before_it_expires() -> None:
    assert may_take(Lease(owner="node-a", expires_at=110.0), "node-a", now=105.0)


def test_another_owner_is_refused_until_the_lease_expires() -> None:
    held = Lease(owner="node-a", expires_at=110.0)
    assert not may_take(held, "node-b", now=109.9)
    assert may_take(held, "node-b", now=110.0)


def test_only_the_owner_may_release_a_lease() -> None:
    held = Lease(owner="node-a", expires_at=110.0)
    assert may_release(held, "node-a")
    assert not may_release(held, "node-b")
    assert not may_release(None, "node-a")
