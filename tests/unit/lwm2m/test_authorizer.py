"""The (D)TLS identity rules on their own (issue 13 #2, #7; issue 29 #1): who may continue a registration, and who
may register an endpoint name."""

from __future__ import annotations

from devicehub.domain.model import Registration
from devicehub.lwm2m.authorizer import Authorizer
from devicehub.lwm2m.security import AuthenticatedAddress, PeerIdentity
from devicehub.lwm2m.server_stats import ServerStats
from support.lwm2m_parts import ACCOUNT, identity

REMOTE = ("192.0.2.1", 5684)


def at(who: PeerIdentity) -> AuthenticatedAddress:
    """REMOTE as a (D)TLS listener hands it up: with the identity its session proved."""
    return AuthenticatedAddress(*REMOTE, who)


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
        host=REMOTE[0],
        port=REMOTE[1],
        registered_at=0.0,
        updated_at=0.0,
        expires_at=393.0,
        gateway=gateway,
        secure=secure,
    )


def _authorizer(
    *, gateways: dict[tuple[str, str], str] | None = None, psks: frozenset[str] = frozenset()
) -> Authorizer:
    return Authorizer(ServerStats(), gateways or {}, psks.__contains__, allow_nosec=True)


def test_plain_coap_continues_only_a_registration_made_over_plain_coap() -> None:
    authorizer = _authorizer()
    assert authorizer.continues(_registration(secure=False), REMOTE, "update")
    assert not authorizer.continues(_registration(secure=True), REMOTE, "update")


def test_a_dtls_identity_continues_only_its_own_registration_in_its_own_account() -> None:
    authorizer = _authorizer()
    secure = _registration(secure=True)
    assert authorizer.continues(secure, at(identity("sensor-1")), "update")
    assert not authorizer.continues(secure, at(identity("sensor-2")), "update")
    assert not authorizer.continues(secure, at(identity("sensor-1", "acc-2")), "update")
    assert not authorizer.continues(_registration(secure=False), at(identity("sensor-1")), "update")


def test_a_gateway_continues_the_child_it_registered() -> None:
    child = _registration(secure=True, gateway="edge-1", name="child-1")
    assert _authorizer().continues(child, at(identity("edge-1")), "notification")


def test_refusals_are_counted_each_time() -> None:
    stats = ServerStats()
    authorizer = Authorizer(stats, {}, lambda name: False, allow_nosec=False)
    assert authorizer.plain_refused(REMOTE) and authorizer.plain_refused(REMOTE)
    assert not authorizer.continues(_registration(secure=True), REMOTE, "send")
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


def test_the_identity_is_read_from_the_address_the_message_came_from() -> None:
    """Issue 29 #2: the remote carries who its (D)TLS session proved to be, and is still the peer's plain address."""
    authorizer = _authorizer()
    secure = at(identity("sensor-1"))
    assert secure == REMOTE and hash(secure) == hash(REMOTE) and {secure: 1}[REMOTE] == 1
    assert authorizer.identity(secure) == identity("sensor-1")
    assert authorizer.identity(REMOTE) is None
    assert authorizer.identity(("192.0.2.1", 5684)) is None  # an equal plain address proves nothing


def test_an_authenticated_remote_is_never_refused_as_plain_coap() -> None:
    stats = ServerStats()
    authorizer = Authorizer(stats, {}, lambda name: False, allow_nosec=False)
    assert not authorizer.plain_refused(at(identity("sensor-1")))
    assert authorizer.plain_refused(REMOTE)
    assert stats.refused_identity == 1


def test_a_registration_made_over_dtls_is_not_continued_from_its_address_without_the_identity() -> None:
    """The same host and port over plain CoAP (a spoofed source) is not the peer that proved the identity."""
    authorizer = _authorizer()
    secure = _registration(secure=True)
    assert authorizer.continues(secure, at(identity("sensor-1")), "send")
    assert not authorizer.continues(secure, REMOTE, "send")
