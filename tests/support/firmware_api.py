"""Firmware images and manifests uploaded to a `devicehub serve` process with the standard library's client."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from support.service import ServiceProcess

FIXTURES = Path(__file__).parent / "firmware"
IMAGE = FIXTURES / "image-1.2.3.bin"
MANIFEST = FIXTURES / "manifest-1.2.3.bin"  # made by manifest-tool for IMAGE (regenerate.sh)


def upload(service: ServiceProcess, path: str, datafile: bytes) -> dict[str, Any]:
    """A multipart upload of `datafile` to `path` (an image or a manifest): the created record."""
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="datafile"; filename="f.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + datafile
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        service.base_url + path,
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {service.api_key}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        found: dict[str, Any] = json.load(response)
        return found


def firmware_counter(service: ServiceProcess, event: str) -> float:
    """`devicehub_firmware_events_total{event}` of the node's /metrics; 0 while it has none."""
    with urllib.request.urlopen(f"{service.base_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(rf'^devicehub_firmware_events_total{{event="{event}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0
