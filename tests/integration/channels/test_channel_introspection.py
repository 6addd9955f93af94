"""issue 34 #5: a channel's state for an operator, `GET /v2/notification/channel?include=status` and the
`devicehub channels` command (a real process against the real API), while a receiver fails."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import msgspec
from channel_harness import Receiver, note, run, serving

from support.waiting import eventually


def test_a_failing_callback_shows_its_state_queue_error_and_next_retry(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[200], default=503) as receiver, serving(tmp_path) as h:
            assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204
            await receiver.next()
            await h.hub.publish_many([([h.key_id], note(n)) for n in range(3)])
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.retry_at is not None)
            await h.clock.advance(0.5)  # the events have waited 0.5 s (the first retry is due after 1 s)

            # the spec's answer stays as it was without the parameter
            assert await h.call("GET", "/v2/notification/channel") == (200, b'{"delivery_mechanism":"CALLBACK"}')
            status, body = await h.call("GET", "/v2/notification/channel?include=status")
            assert status == 200
            answer = msgspec.json.decode(body)
            assert answer["delivery_mechanism"] == "CALLBACK"
            state = answer["status"]
            assert state["state"] == "retrying"
            assert (state["queue_size"], state["consecutive_failures"]) == (3, 1)
            assert state["queue_bytes"] > 0
            assert state["oldest_age_s"] >= 0.5
            assert state["last_error"].startswith("503")
            assert "next_retry_at" in state
            assert state["drops"] == {"byte_cap": 0, "lifetime": 0, "failed": 0}

            command = [sys.executable, "-m", "devicehub", "channels", "--url", h.base, "--api-key", h.secret]
            process = await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ)
            )
            out, err = await process.communicate()
            assert process.returncode == 0, err
            lines = out.decode().splitlines()
            assert "delivery_mechanism: CALLBACK" in lines
            assert "state: retrying" in lines
            assert "queue_size: 3" in lines
            assert "drops: byte_cap 0, lifetime 0, failed 0" in lines

    run(main())
