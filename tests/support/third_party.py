"""Third-party clients the suite drives, from Debian packages that scripts/test.sh and .ci/run install.

A missing one fails the test that needs it, saying what to install: a skip would let the check it carries go
unnoticed.
"""

from __future__ import annotations

import asyncio
import logging
import shutil

import pytest

from support.device_pki import Issued
from support.waiting import eventually


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


async def start_coap_client(*args: str, wait: float = 0.0) -> asyncio.subprocess.Process:
    """coap-client-openssl with `args`; with `wait` it keeps its session open that long (-B) after the answer."""
    extra = ["-B", str(wait)] if wait else []
    return await asyncio.create_subprocess_exec(
        coap_client_binary(), *extra, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )


async def coap_client(*args: str, wait: float = 0.0) -> tuple[int, str]:
    """Run coap-client-openssl to its end: its exit code and output."""
    process = await start_coap_client(*args, wait=wait)
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    return process.returncode or 0, out.decode(errors="replace")


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings logged that refuse something."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "refused" in r.getMessage()]


async def refused_client(caplog: pytest.LogCaptureFixture, *args: str) -> list[str]:
    """Run a client the service refuses; once the refusal is logged the client (perhaps retrying) is stopped."""
    process = await start_coap_client(*args)
    try:
        await eventually(lambda: bool(refusals(caplog)), within=20)
    finally:
        if process.returncode is None:
            process.kill()
        await process.communicate()
    return refusals(caplog)


def certificate_args(issued: Issued) -> list[str]:
    """coap-client's options presenting `issued` (and not checking the server's certificate: it is self-signed)."""
    return ["-c", str(issued.cert_file), "-j", str(issued.key_file), "-n"]
