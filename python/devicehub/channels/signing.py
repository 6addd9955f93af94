"""Callback signatures per the Standard Webhooks specification (issue 34 #3; standardwebhooks.com, spec.md
"Signature scheme"): `webhook-id`, `webhook-timestamp` and `webhook-signature` with one `v1,<base64 HMAC-SHA256>`
of `id.timestamp.body` per secret in force, space-separated, so a receiver verifies across a rotation.

A secret is `whsec_` and the base64 of 24…64 random bytes (the specification's bounds). A rotation keeps the
previous secret signing until its overlap ends, so receivers switch over without a window of refused requests.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Mapping, Sequence

from devicehub.domain.model import ChannelSecret
from devicehub.errors import FieldError, ValidationFailed

PREFIX = "whsec_"
MIN_KEY_BYTES = 24  # Standard Webhooks: secrets are 24…64 bytes
MAX_KEY_BYTES = 64
GENERATED_KEY_BYTES = 32


def generate() -> str:
    """A new secret: 32 random bytes (256 bits, the HMAC-SHA256 block's strength)."""
    return PREFIX + base64.b64encode(os.urandom(GENERATED_KEY_BYTES)).decode()


def parse(value: object, field: str = "secret") -> str:
    """Validate an application-given secret; raises ValidationFailed (400) naming the field."""
    if not isinstance(value, str) or not value.startswith(PREFIX):
        raise _invalid(field, f"must be a string starting with {PREFIX!r}")
    try:
        key = base64.b64decode(value[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(field, f"must be {PREFIX!r} followed by base64") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise _invalid(field, f"must hold {MIN_KEY_BYTES}…{MAX_KEY_BYTES} bytes")
    return value


def in_force(secrets: Sequence[ChannelSecret], now: float) -> list[ChannelSecret]:
    """The secrets that still sign at `now` (wall-clock seconds): the current one and any in its overlap."""
    return [s for s in secrets if s.until is None or s.until > now]


def rotate(secrets: Sequence[ChannelSecret], new: str, now: float, overlap_s: float) -> list[ChannelSecret]:
    """`new` becomes the current secret; the ones in force keep signing until `now + overlap_s` at most."""
    ending = now + overlap_s
    kept = [ChannelSecret(s.value, ending if s.until is None else min(s.until, ending)) for s in in_force(secrets, now)]
    return [ChannelSecret(new, None), *(s for s in kept if s.until is not None and s.until > now)]


def headers(secrets: Sequence[ChannelSecret], message_id: str, body: bytes) -> Mapping[str, str]:
    """The three Standard Webhooks headers for `body`, or none when no secret is in force.

    The timestamp is wall-clock time, not the service's injected clock: receivers compare it with theirs to refuse
    replays (the specification's tolerance is five minutes).
    """
    now = time.time()
    keys = in_force(secrets, now)
    if not keys:
        return {}
    stamp = str(int(now))
    signed = b"%s.%s.%s" % (message_id.encode(), stamp.encode(), body)
    signatures = " ".join(
        "v1," + base64.b64encode(hmac.digest(_key(s.value), signed, hashlib.sha256)).decode() for s in keys
    )
    return {"webhook-id": message_id, "webhook-timestamp": stamp, "webhook-signature": signatures}


def _key(secret: str) -> bytes:
    return base64.b64decode(secret[len(PREFIX) :])


def _invalid(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", fields=(FieldError(name, message),))
