"""The (D)TLS identity rules on their own (issue 13 #2, #7; issue 29 #1): who may continue a registration, and who
may register an endpoint name."""

from __future__ import annotations

from devicehub.domain.registration import Registration
from devicehub.lwm2m.authorizer import Authorizer
from devicehub.lwm2m.server_stats import ServerStats
from support.lwm2m_parts import ACCOUNT, identity

REMOTE = ("192.0.2.1", 5684)


def _registration(*, secure: bool, gateway: str = "", name: str = "sensor-1") -> Registration:
    return Registration(
        account_id=ACCOUNT,
        device_id=f"dev-{name}",
        endpoint_name=name,
        endpoint_type="",
        lifetime=300,
        binding="U",
        lwm2m_version="1.1",
        links=(),
        address=REMOTE,
        registered_at=0.0,
        updated_at=0.0,
        gateway=gateway,
        secure=secure,
    )


def _authorizer(
    *, gateways: dict[tuple[str, str], str] | None = None, psks: frozenset[str] = frozenset()
) -> Authorizer:
    return Authorizer(ServerStats(), gateways or {}, psks.__contains__, allow_nosec=True)


def test_plain_coap_continues_only_a_registration_made_over_plain_coap() -> None:
    authorizer = _authorizer()
    assert authorizer.continues(_registration(secure=False), None, REMOTE, "update")
    assert not authorizer.continues(_registration(secure=True), None, REMOTE, "update")


def test_a_dtls_identity_continues_only_its_own_registration_in_its_own_account() -> None:
    authorizer = _authorizer()
    secure = _registration(secure=True)
    assert authorizer.continues(secure, identity("sensor-1"), REMOTE, "update")
    assert not authorizer.continues(secure, identity("sensor-2"), REMOTE, "update")
    assert not authorizer.continues(secure, identity("sensor-1", "acc-2"), REMOTE, "update")
    assert not authorizer.continues(_registration(secure=False), identity("sensor-1"), REMOTE, "update")


def test_a_gateway_continues_the_child_it_registered() -> None:
    child = _registration(secure=True, gateway="edge-1", name="child-1")
    assert _authorizer().continues(child, identity("edge-1"), REMOTE, "notification")


def test_refusals_are_counted_each_time() -> None:
    stats = ServerStats()
    authorizer = Authorizer(stats, {}, lambda name: False, allow_nosec=False)
    assert authorizer.plain_refused(REMOTE) and authorizer.plain_refused(REMOTE)
    assert not authorizer.continues(_registration(secure=True), None, REMOTE, "send")
    assert stats.refused_identity == 3


def test_an_identity_registers_its_own_name_or_a_child_behind_its_own_registration() -> None:
    gateways = {(ACCOUNT, "edge-1"): "dev-edge-1"}
    authorizer = _authorizer(gateways=gateways, psks=frozenset({"child-psk"}))
    assert authorizer.register_refusal(identity("sensor-1"), "sensor-1", "") == ""
    assert authorizer.register_refusal(identity("sensor-1"), "sensor-2", "") == "identity is not the endpoint name"
    assert authorizer.register_refusal(identity("edge-1"), "child-1", "edge-1") == ""
    assert authorizer.register_refusal(identity("edge-1"), "child-psk", "edge-1") == "the device has a PSK of its own"
    assert authorizer.register_refusal(identity("edge-2"), "child-1", "edge-2") == (
        "the gateway has no registration of its own"
    )
