"""Device → application latency for `devicehub simulate --app` (issue 16 #4): the simulator is the application
too, on a WebSocket notification channel of the service, and reads each notification's send time from its
payload (the hot path's notifications carry it), recording the delay in a log-bucket histogram."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

import aiohttp
import msgspec

from devicehub._core import LatencyHistogram
from devicehub.clock import Clock
from devicehub.sim.objects import BATTERY, TEMPERATURE

PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9))
# the resource the hot path notifies, by flavour: the Pelion flavour's auto-observed battery, the temperature an
# OMA device is observed on once a presubscription asks for it
PATHS = {"pelion": BATTERY, "oma": TEMPERATURE}
MAX_FRAME = 16 * 1024 * 1024


class _Note(msgspec.Struct):
    payload: str = ""


class _Message(msgspec.Struct):
    notifications: list[_Note] = []


class LatencyProbe:
    """The application end: presubscribes to the `PATHS` of the fleet's `flavors` (added to the account's
    presubscriptions, which are put back on `stop`), opens the WebSocket channel and records now − the payload's
    send time, in microseconds."""

    def __init__(self, app: str, api_key: str, clock: Clock, flavors: Iterable[str] = ("pelion", "oma")) -> None:
        self.app, self.api_key, self.clock = app.rstrip("/"), api_key, clock
        self.paths = sorted({PATHS[flavor] for flavor in flavors})
        self.histogram = LatencyHistogram()
        self.unstamped = 0  # notifications whose payload is no send time (sent on the normal path)
        self.per_second: Counter[int] = Counter()  # notifications received in each whole second of the clock
        self._first_at: float | None = None  # when the first and the last message arrived
        self._last_at = 0.0
        self._decoder = msgspec.json.Decoder(_Message)
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._previous: list[Any] | None = None

    async def start(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        self._http = aiohttp.ClientSession(self.app, headers=headers)
        async with self._http.get("/v2/subscriptions") as response:
            response.raise_for_status()
            self._previous = await response.json()
        wanted = [*self._previous, {"resource-path": self.paths}]
        async with self._http.put("/v2/subscriptions", json=wanted) as response:
            response.raise_for_status()
        async with self._http.put("/v2/notification/websocket", json={}) as response:
            response.raise_for_status()
        self._ws = await self._http.ws_connect("/v2/notification/websocket-connect", max_msg_size=MAX_FRAME)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._ws is not None
        async for frame in self._ws:
            if frame.type == aiohttp.WSMsgType.TEXT:
                self.take(frame.data.encode() if isinstance(frame.data, str) else frame.data)

    def take(self, frame: bytes) -> None:
        """Record the latency of each notification of one NotificationMessage."""
        try:
            message = self._decoder.decode(frame)
        except msgspec.DecodeError:
            return
        now = self.clock.now()
        self.per_second[int(now)] += len(message.notifications)
        if self._first_at is None:
            self._first_at = now
        self._last_at = now
        record = self.histogram.record
        for note in message.notifications:
            try:
                sent = float(base64.b64decode(note.payload))
            except (ValueError, binascii.Error):
                self.unstamped += 1
                continue
            if sent < 1e9:  # a value, not a send time
                self.unstamped += 1
                continue
            record(round((now - sent) * 1e6))

    def summary(self) -> dict[str, float | int]:
        """Milliseconds: p50, p90, p99, p99.9 and max of what was received, and the count."""
        histogram = self.histogram
        result: dict[str, float | int] = {"count": histogram.count}
        for name, percentile in PERCENTILES:
            result[name] = round(histogram.percentile(percentile) / 1000, 3)
        result["max"] = round(histogram.max / 1000, 3)
        result["received_per_s"] = self.received_per_s()
        return result

    def received_per_s(self) -> int:
        """The median of the notifications received in each whole second but the first and the last (cut short);
        a run too short to have such a second gets its mean rate between the first and the last message instead
        (a smoke run of one second reported 0)."""
        seconds = sorted(self.per_second)[1:-1]
        if seconds:
            return round(statistics.median(self.per_second[s] for s in seconds))
        span = self._last_at - (self._first_at if self._first_at is not None else self._last_at)
        received = sum(self.per_second.values())
        return round(received / span) if span > 0 else 0

    def progress(self) -> str:
        s = self.summary()
        return f"  latency p50 {s['p50']} ms p99 {s['p99']} ms max {s['max']} ms ({s['count']} received)"

    async def stop(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._http is not None:
            with contextlib.suppress(aiohttp.ClientError):
                if self._previous is not None:
                    async with self._http.put("/v2/subscriptions", json=self._previous):
                        pass
                async with self._http.delete("/v2/notification/websocket"):
                    pass
            await self._http.close()
