"""Who may act on a registration: the (D)TLS identity rules of Register, Update, De-register, Send and notifications.

Over (D)TLS the peer's authenticated identity decides the device (issue 13): a PSK identity or certificate CN must be
the endpoint name it registers; a registration made over (D)TLS is continued (Update, De-register, Send,
notifications) only by that identity, never over plain CoAP; plain CoAP is refused altogether unless `allow_nosec`.
The identity is read from the remote address a message came from (security.AuthenticatedAddress, issue 29 #2): the
DTLS and TLS listeners hand up each message from an address carrying who its session proved to be, and a plain
CoAP remote carries none.
One exception, for Edge gateways (issue 13 #7): a peer authenticated as G may register a child endpoint with `gw=G`
into G's account, and G then continues it, unless the child has a PSK of its own or holds a (D)TLS registration not
made through G (the gateway vouches for the devices behind it, as Pelion's Edge did with its own credentials).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from devicehub.domain.model import Registration
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.security import PeerIdentity, identity_of
from devicehub.lwm2m.server_stats import ServerStats

log = logging.getLogger("devicehub.lwm2m")

MAX_WARNED = 10_000  # distinct refusals remembered so each is logged once


class Authorizer:
    """Decides, counts and logs (once per kind of refusal) what a peer may do; `gateways` is the registry's table of
    registrations a (D)TLS identity made for itself, and `has_psk` asks the listeners' keyring."""

    def __init__(
        self,
        stats: ServerStats,
        gateways: dict[tuple[str, str], str],
        has_psk: Callable[[str], bool],
        *,
        allow_nosec: bool = True,
    ) -> None:
        self._stats = stats
        self._gateways = gateways
        self._has_psk = has_psk
        self.allow_nosec = allow_nosec
        self._warned: dict[tuple[str, ...], None] = {}

    @staticmethod
    def identity(remote: Address) -> PeerIdentity | None:
        """Who the peer at `remote` proved to be over (D)TLS; None for plain CoAP."""
        return identity_of(remote)

    def plain_refused(self, remote: Address) -> bool:
        """Is a message from `remote` plain CoAP where the service requires DTLS or TLS? Counted and logged once."""
        if self.allow_nosec or identity_of(remote) is not None:
            return False
        self._stats.refused_identity += 1
        self._warn_once(
            ("nosec", remote[0]),
            "plain CoAP from %s refused: this service requires DTLS or TLS (--allow-nosec accepts plain CoAP)",
            remote[0],
        )
        return True

    def continues(self, registration: Registration, remote: Address, what: str) -> bool:
        """May the peer at `remote` act on the registration? Logs the refusal once (issue 13 #2)."""
        identity = identity_of(remote)
        if identity is None:
            allowed = not registration.secure
        else:
            allowed = (
                registration.secure
                and identity.name in (registration.endpoint_name, registration.gateway or registration.endpoint_name)
                and identity.account_id == registration.account_id
            )
        if not allowed:
            self._stats.refused_identity += 1
            who = "plain CoAP" if identity is None else f"(D)TLS identity {identity.name!r}"
            self._warn_once(
                (what, registration.device_id, who),
                "%s for %s refused: %s from %s:%d may not continue a registration made %s",
                what,
                registration.endpoint_name,
                who,
                remote[0],
                remote[1],
                "over (D)TLS by that device" if registration.secure else "over plain CoAP",
            )
        return allowed

    def register_refusal(self, identity: PeerIdentity, endpoint_name: str, gateway: str) -> str:
        """Why `identity` may not register `endpoint_name` (with `gw=gateway`), before admission; "" when it may."""
        if identity.name == endpoint_name:
            return ""
        if gateway != identity.name:
            return "identity is not the endpoint name"
        if self._has_psk(endpoint_name):
            return "the device has a PSK of its own"
        if (identity.account_id, identity.name) not in self._gateways:
            return "the gateway has no registration of its own"
        return ""

    def refuse_register(self, identity: str, endpoint_name: str, why: str) -> None:
        """Count and log (once) a Register refused for the peer's identity."""
        self._stats.refused += 1
        self._stats.refused_identity += 1
        self._warn_once(
            ("register", identity, endpoint_name),
            "register refused: (D)TLS identity %r may not register endpoint name %r: %s",
            identity,
            endpoint_name,
            why,
        )

    def _warn_once(self, key: tuple[str, ...], text: str, *args: object) -> None:
        if key in self._warned:
            return
        if len(self._warned) >= MAX_WARNED:
            del self._warned[next(iter(self._warned))]
        self._warned[key] = None
        log.warning(text, *args)
