"""The device's observations: who observes what, notification attributes, and when a notification goes.

RFC 7641 (Observe) with the LwM2M notification attributes pmin, pmax, gt, lt, st (LwM2M 1.0 §5.1.2; the rules
themselves are in sim/attributes.py): each observation has its token, its Observe sequence number and the time and
value of its last notification.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from devicehub._core import coap_encode_uint
from devicehub.clock import Clock, Timer
from devicehub.domain.device_results import DeviceError, DeviceReset
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Reply
from devicehub.sim import attributes
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.objects import FLOAT, INT, Model

# what a read of `path` with `accept` answers (the responder's read)
Read = Callable[[str, int | None], Reply]
# sends one notification to the server: (code, token, options, payload, confirmable); raises DeviceReset when the
# server answers it with a Reset, DeviceError when it goes unanswered
SendNotification = Callable[[int, bytes, list[tuple[int, bytes]], bytes, bool], Awaitable[None]]


@dataclass(slots=True)
class Observation:
    """One observation of `path` by the server, under `token`."""

    path: str
    token: bytes
    accept: int | None
    seq: int = 0
    last_sent_at: float = 0.0
    last_value: float | None = None
    pending: Timer | None = None  # pmin: the one deferred notification
    periodic: asyncio.Task[None] | None = None  # pmax: the notification that goes without a change


class Observers:
    """The observations by token, the notification attributes by path, and the notifications they send."""

    def __init__(
        self,
        clock: Clock,
        model: Model,
        counters: DeviceCounters,
        *,
        read: Read,
        send: SendNotification,
        registered: asyncio.Event,
        confirmable: Callable[[], bool],
        restart_seq: bool = False,
    ) -> None:
        self.clock = clock
        self.model = model
        self.counters = counters
        self.by_token: dict[bytes, Observation] = {}
        self.attributes: dict[str, dict[str, float]] = {}  # Write-Attributes, by the path they were written on
        # called when an observation or an attribute comes or goes (the hot path forgets its choice)
        self.on_change: Callable[[], None] = lambda: None
        self._read, self._send = read, send
        self._registered, self._confirmable = registered, confirmable
        # Anjay: a re-observe with the same token opens a new stream at Observe 0 (OmaBehaviour.restart_observe_seq)
        self._restart_seq = restart_seq
        self._tasks: set[asyncio.Task[None]] = set()

    def observe(self, token: bytes, path: str, accept: int | None) -> Reply:
        """The answer to an Observe request (GET Observe 0): the read, with the Observe option when it succeeded."""
        reply = self._read(path, accept)
        if reply.code != codes.CONTENT:
            return reply
        observation = self.by_token.get(token)
        if observation is None or observation.path != path:
            observation = Observation(path=path, token=token, accept=accept)
            self.by_token[token] = observation
            self.on_change()
        elif self._restart_seq:
            observation.seq = 0
        # the Observe response counts as the first notification (pmin, pmax and st count from it)
        observation.last_sent_at = self.clock.now()
        observation.last_value = self._numeric(path)
        self._start_periodic(observation)
        return Reply(reply.code, [(codes.OBSERVE, coap_encode_uint(observation.seq)), *reply.options], reply.payload)

    def observe_unasked(self, token: bytes, path: str) -> None:
        """An observation with no Observe request: the Pelion client's `aobs` resource after it registered."""
        self.by_token[token] = Observation(path=path, token=token, accept=None)
        self.on_change()

    def cancel(self, token: bytes) -> None:
        """End the observation under `token` (RFC 7641 §3.6: a GET Observe 1, or a Reset answering a notification)."""
        self.on_change()
        observation = self.by_token.pop(token, None)
        if observation is not None:
            _cancel_timers(observation)

    def clear(self) -> None:
        """End every observation: a new registration does (lwm2m-device-side.md §4)."""
        for observation in self.by_token.values():
            _cancel_timers(observation)
        self.by_token.clear()
        self.on_change()

    def write_attributes(self, path: str, query: list[str]) -> None:
        """Apply a Write-Attributes query at `path`; raises attributes.BadAttribute and then changes nothing."""
        self.attributes[path] = attributes.parse_query(query, self.attributes.get(path, {}))
        self.on_change()
        for observation in self.by_token.values():
            if (
                observation.path == path
                or observation.path.startswith(path + "/")
                or path.startswith(observation.path + "/")
            ):
                self._start_periodic(observation)

    def changed(self, path: str) -> None:
        """The value at `path` changed: notify the observations of it (or of what holds it) that want it."""
        now = self.clock.now()
        for observation in list(self.by_token.values()):
            if path == observation.path or path.startswith(observation.path + "/"):
                self._maybe_notify(observation, now)

    async def close(self) -> None:
        """Stop every timer and notification in flight."""
        for observation in self.by_token.values():
            _cancel_timers(observation)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _maybe_notify(self, observation: Observation, now: float) -> None:
        rules = attributes.effective(self.attributes, observation.path)
        current = self._numeric(observation.path)
        if not rules.should_notify(observation.last_value, current, now - observation.last_sent_at):
            return
        wait = (rules.pmin or 0) - (now - observation.last_sent_at)
        if wait > 0:
            if observation.pending is None:  # pmin: one deferred notification carries the latest value
                observation.pending = self.clock.call_later(wait, lambda: self._deferred(observation))
            return
        self._spawn(self._notify(observation))

    def _deferred(self, observation: Observation) -> None:
        observation.pending = None
        self._spawn(self._notify(observation))

    def _numeric(self, path: str) -> float | None:
        resource = self.model.resource(path)
        if resource is None or resource.kind not in (INT, FLOAT):
            return None
        return float(resource.value)

    async def _notify(self, observation: Observation) -> None:
        if observation.token not in self.by_token or not self._registered.is_set():
            return
        reply = self._read(observation.path, observation.accept)
        observation.seq = (observation.seq + 1) & 0xFFFFFF  # RFC 7641 §4.4: 24 bits
        observation.last_sent_at = self.clock.now()
        observation.last_value = self._numeric(observation.path)
        options = [(codes.OBSERVE, coap_encode_uint(observation.seq)), *reply.options]
        confirmable = self._confirmable()
        try:
            await self._send(reply.code, observation.token, options, reply.payload, confirmable)
            self.counters.notifications += 1
            self.counters.acked += confirmable
        except DeviceReset:
            self.cancel(observation.token)  # reactive cancel (RFC 7641 §3.6)
        except DeviceError:
            self.counters.errors += 1

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_periodic(self, observation: Observation) -> None:
        if observation.periodic is None or observation.periodic.done():
            if attributes.effective(self.attributes, observation.path).pmax:
                observation.periodic = asyncio.ensure_future(self._periodic(observation))

    async def _periodic(self, observation: Observation) -> None:
        """pmax: notify at least every pmax seconds even without a change."""
        while True:
            pmax = attributes.effective(self.attributes, observation.path).pmax
            if not pmax:
                return
            await self.clock.sleep(max(pmax - (self.clock.now() - observation.last_sent_at), 0.05))
            if self.clock.now() - observation.last_sent_at >= pmax:
                await self._notify(observation)


def _cancel_timers(observation: Observation) -> None:
    if observation.pending is not None:
        observation.pending.cancel()
    if observation.periodic is not None:
        observation.periodic.cancel()
