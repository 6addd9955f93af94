"""`devicehub channels` (issue 34 #5): a key's channel as the running service sees it, one field a line.

It asks the service (`GET /v2/notification/channel?include=status`) rather than the store: queue depth, rate and
errors live in the owning node's memory.
"""

from __future__ import annotations

import sys

import aiohttp
import msgspec

from devicehub.config import ChannelsSettings
from devicehub.errors import BadSetting


async def show(settings: ChannelsSettings) -> int:
    """Print the channel's state; exit code 0, 1 when the key has no channel."""
    if not settings.api_key:
        raise BadSetting("--api-key (or DEVICEHUB_API_KEY) is required")
    url = settings.url.rstrip("/") + "/v2/notification/channel?include=status"
    headers = {"Authorization": f"Bearer {settings.api_key}"}
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        body = await response.read()
        if response.status == 404:
            print("no notification channel for this key", file=sys.stderr)
            for name, value in _removed(body).items():  # issue 34 #4: the service removed it lately
                print(f"removed {name}: {value}", file=sys.stderr)
            return 1
        if response.status != 200:
            print(f"{url}: {response.status} {body.decode(errors='replace')}", file=sys.stderr)
            return 2
    answer = msgspec.json.decode(body)
    print(f"delivery_mechanism: {answer['delivery_mechanism']}")
    for name, value in answer["status"].items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        print(f"{name}: {value}")
    return 0


def _removed(body: bytes) -> dict[str, object]:
    """What was removed, when and why, from a 404's JSON body (empty for a plain 404)."""
    try:
        answer = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return {}
    removed = answer.get("removed") if isinstance(answer, dict) else None
    return removed if isinstance(removed, dict) else {}
