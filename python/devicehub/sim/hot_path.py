"""The load hot path (issue 16 #4): a notification datagram encoded once per observation, patched per send.

`devicehub simulate --hot-path` sends most notifications this way: only the message ID, the Observe number and the
payload change between two notifications of one observation, so the datagram is encoded once and those three are
filled in. Devices that cannot take it (see `HotPath.notify`) fall back to the normal path (sim/observers.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from devicehub._core import CoapNotification
from devicehub.domain.content_formats import TEXT
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.objects import FLOAT, INT, Model, Resource
from devicehub.sim.observers import Observation, Observers, Read

HOT_MIN_BLOCK = 64  # the hot path sends one datagram: its payload (a send time: 17 bytes) must fit one block


class HotPathHost(Protocol):
    """The device whose notifications go the hot path: where they go, and whether it is registered."""

    server: Address
    registered: asyncio.Event


@dataclass(frozen=True, slots=True)
class _Hot:
    """An observation the hot path notifies: its resource, its notification encoded once, the endpoint it leaves by
    (a new endpoint comes with a new registration, which ends every observation and so this choice)."""

    observation: Observation
    resource: Resource
    template: CoapNotification
    integer: bool
    endpoint: CoapEndpoint


class HotPath:
    """Sends the notifications of one device's newest plain-text numeric observation from a datagram encoded once."""

    def __init__(
        self,
        device: HotPathHost,
        model: Model,
        observers: Observers,
        counters: DeviceCounters,
        *,
        read: Read,
        possible: Callable[[], bool],
        endpoint: Callable[[], CoapEndpoint],
    ) -> None:
        self.device = device
        self.model = model
        self.observers = observers
        self.counters = counters
        self._read = read
        # NON notifications over plain UDP with datagrams of HOT_MIN_BLOCK bytes at least (the device's settings)
        self._possible = possible
        self._endpoint = endpoint
        self._hot: _Hot | None = None  # the observation the hot path notifies, once looked for
        self._checked = False

    def forget(self) -> None:
        """Look for the observation again at the next send: observations, attributes or settings changed."""
        self._hot, self._checked = None, False

    def notify(self, now: float, step: float, payload: bytes | None = None) -> bool:
        """Change the observed resource's value by `step` (an integer one by 1 towards the sign of `step`, within
        0-100) and send its notification from the observation's datagram encoded once: only the message ID,
        Observe and payload are filled in. `payload` (a send time, to measure latency) replaces the value's text.

        False, with nothing sent or changed, when this device cannot take the hot path now: not registered, no
        observation of a number in plain text, confirmable notifications (they wait for an ACK), notification
        attributes (pmin, pmax, gt, lt, st are judged on the normal path), DTLS or TCP; the caller then takes the
        normal path (`SimDevice.vary_once`)."""
        hot = self._hot if self._checked else self._find()
        device = self.device
        if hot is None or not device.registered.is_set():
            return False
        resource, observation, endpoint = hot.resource, hot.observation, hot.endpoint
        if step:
            if hot.integer:
                resource.value = min(max(int(resource.value) + (1 if step > 0 else -1), 0), 100)
            else:
                resource.value = round(float(resource.value) + step, 2)
        observation.seq = (observation.seq + 1) & 0xFFFFFF
        observation.last_sent_at = now
        datagram = hot.template.encode(endpoint.new_mid(), observation.seq, payload or resource.text())
        endpoint.send_datagram(datagram, device.server)
        self.counters.notifications += 1
        return True

    def _find(self) -> _Hot | None:
        """The newest observation the hot path can notify (see `notify`), its notification encoded once: the server's
        own Observe of a resource comes after the Pelion flavour's auto-observation of it, and the server then knows
        the resource by its own token."""
        self._checked = True
        if not self._possible() or self.observers.attributes:
            return None
        for observation in reversed(self.observers.by_token.values()):
            resource = self.model.resource(observation.path)
            if resource is None or resource.kind not in (INT, FLOAT) or resource.executable:
                continue
            if observation.accept not in (None, TEXT):
                continue
            reply = self._read(observation.path, observation.accept)  # the options the normal path sends
            template = CoapNotification(codes.NON, reply.code, observation.token, reply.options)
            self._hot = _Hot(observation, resource, template, resource.kind == INT, self._endpoint())
            return self._hot
        return None
