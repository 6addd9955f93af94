"""HTTPS for the REST API and the WebSocket channel (`--tls-cert`, `--tls-key`, optional `--tls-client-ca`)."""

from __future__ import annotations

import ssl

from devicehub.config import ServeSettings


def server_context(settings: ServeSettings) -> ssl.SSLContext | None:
    """The listener's TLS context, or None for plain HTTP; raises ValueError on an incomplete or unreadable setup."""
    if not settings.tls_cert and not settings.tls_key and not settings.tls_client_ca:
        return None
    if not settings.tls_cert:
        raise ValueError("--tls-key and --tls-client-ca need --tls-cert")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key or None)
        if settings.tls_client_ca:
            # applications then prove themselves with a certificate as well as their API key
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(settings.tls_client_ca)
    except (OSError, ssl.SSLError) as error:
        raise ValueError(f"cannot load the HTTPS certificate or key: {error}") from None
    return context
