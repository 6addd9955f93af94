"""issue 34 #2: an async-response on a cursor channel carries a `device_seq` in the sequence of the device the
request went to (the service knows it; the wire gains only that extra field), so an application sees a gap in
a device's events whichever kind they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from aiohttp import WSMsgType
from channel_harness import note, run, serving

from devicehub.domain.events import AsyncResponseEvent

DEVICE = "a" * 32
OTHER = "b" * 32


def test_an_async_response_takes_the_next_device_seq_of_its_device(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            body = {"serialization": {"cfg": {"include_cursor": True}}}
            assert (await h.call("PUT", "/v2/notification/websocket", json=body))[0] == 201
            await h.hub.publish([h.key_id], note(1, device=DEVICE))
            await h.hub.publish([h.key_id], AsyncResponseEvent(async_id="r-1", status=200, device_id=DEVICE))
            await h.hub.publish([h.key_id], note(2, device=OTHER))
            await h.hub.publish([h.key_id], note(3, device=DEVICE))
            await h.hub.publish([h.key_id], AsyncResponseEvent(async_id="r-2", status=504, error="TIMEOUT"))
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{h.secret}"))
            seen: list[dict[str, Any]] = []
            while len(seen) < 5:
                message = await ws.receive(timeout=5)
                assert message.type is WSMsgType.TEXT
                frame = msgspec.json.decode(str(message.data).encode())
                seen += frame.get("notifications", []) + frame.get("async-responses", [])
            seen.sort(key=lambda e: e["cursor"])
            answers = {e["id"]: e for e in seen if "id" in e}
            assert answers["r-1"]["device_seq"] == 2  # after the device's first notification
            assert [e["device_seq"] for e in seen if e.get("ep") and e["cursor"] == 4] == [3]
            assert "device_seq" not in answers["r-2"]  # no device named: as before
            assert set(answers["r-1"]) == {"id", "status", "payload", "ct", "max-age", "cursor", "device_seq"}
            await ws.close()

    run(main())
