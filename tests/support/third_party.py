"""Third-party clients the suite drives, from Debian packages that scripts/test.sh and .ci/run install.

A missing one fails the test that needs it, saying what to install: a skip would let the check it carries go
unnoticed.
"""

from __future__ import annotations

import shutil

import pytest


def coap_client_binary() -> str:
    """libcoap's `coap-client` with its OpenSSL backend (CoAP, CoAP over DTLS and over TCP)."""
    path = shutil.which("coap-client-openssl")
    if path is None:
        pytest.fail("coap-client-openssl is missing: install Debian's libcoap3-bin (scripts/test.sh does)")
    return path


def openssl_binary() -> str:
    """OpenSSL's command line (`openssl s_client -dtls1_2`: a DTLS client that can offer a previous session)."""
    path = shutil.which("openssl")
    if path is None:
        pytest.fail("openssl is missing: install Debian's openssl (scripts/test.sh does)")
    return path
