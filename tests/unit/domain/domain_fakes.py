"""Fakes of the domain's ports for unit tests of its services (the request queue, the subscription router): a store
of requests, subscriptions and snapshot values in dicts, a gateway that answers as the test scripts it, a sink that
records what was published. No sockets; the tests move a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

from devicehub.domain.device_results import DeviceError, DeviceResponse
from devicehub.domain.events import AsyncResponseEvent, Event, NotificationEvent
from devicehub.domain.model import (
    DesiredValue,
    Device,
    DeviceRequest,
    PresubscriptionRule,
    ReportedValue,
    SnapshotResource,
)
from devicehub.domain.storage.store import Store
from devicehub.errors import DuplicateAsyncId, QueueFull, Unavailable

START = 1_800_000_000.0  # ManualClock's start
ACCOUNT = "a" * 32
DEVICE = "d" * 32
CONTENT = 0x45  # CoAP 2.05
CHANGED = 0x44  # CoAP 2.04


def device(device_id: str = DEVICE, name: str = "sensor-1", endpoint_type: str = "") -> Device:
    return Device(
        id=device_id,
        account_id=ACCOUNT,
        endpoint_name=name,
        endpoint_type=endpoint_type,
        created_at=START,
        updated_at=START,
        last_seen_at=START,
    )


def request(
    async_id: str,
    *,
    method: str = "GET",
    uri: str = "/3/0/0",
    payload: bytes = b"",
    key_id: str = "k1",
    retries_left: int = 0,
    expires_at: float = START + 3600,
    device_id: str = DEVICE,
) -> DeviceRequest:
    return DeviceRequest(
        async_id=async_id,
        key_id=key_id,
        account_id=ACCOUNT,
        device_id=device_id,
        method=method,
        uri=uri,
        payload=payload,
        retries_left=retries_left,
        created_at=START,
        expires_at=expires_at,
    )


class FakeStore:
    """The store calls the request queue and the subscription router make, over dicts, with the rules the store
    contract tests hold the real stores to (enqueue refuses a pending async-id and a full queue in one step)."""

    def __init__(self) -> None:
        self.requests: list[DeviceRequest] = []
        self.desired: dict[tuple[str, str], DesiredValue] = {}
        self.devices: dict[str, Device] = {}
        self.subscriptions: list[tuple[str, str, str]] = []  # (key, device, pattern), in the order added
        self.presubscriptions: list[tuple[str, list[PresubscriptionRule]]] = []  # the account's, per key
        self.subscribed: dict[tuple[str, str], bool] = {}
        self.reported: dict[tuple[str, str], ReportedValue] = {}
        self.down = False  # every call raises Unavailable, as a store in an outage does

    def as_store(self) -> Store:
        return cast(Store, self)

    def _up(self) -> None:
        if self.down:
            raise Unavailable("store down")

    def unavailable(self, error: BaseException) -> bool:
        return isinstance(error, Unavailable)

    # ---- requests ----------------------------------------------------------------------------------------------
    async def enqueue_request(
        self, request: DeviceRequest, max_pending: int = 0, desired: tuple[str, DesiredValue] | None = None
    ) -> None:
        self._up()
        if any((r.key_id, r.async_id) == (request.key_id, request.async_id) for r in self.requests):
            raise DuplicateAsyncId(request.async_id)
        if max_pending and sum(r.device_id == request.device_id for r in self.requests) >= max_pending:
            raise QueueFull(request.device_id)
        self.requests.append(request)
        if desired is not None:
            self.desired[(request.device_id, desired[0])] = desired[1]

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        self._up()
        return [r for r in self.requests if r.device_id == device_id]

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        self._up()
        return {r.device_id for r in self.requests} & set(device_ids)

    async def all_pending_requests(self) -> list[DeviceRequest]:
        self._up()
        return list(self.requests)

    async def update_request(self, request: DeviceRequest) -> None:
        self._up()
        self.requests = [
            request if (r.key_id, r.async_id) == (request.key_id, request.async_id) else r for r in self.requests
        ]

    async def remove_request(self, key_id: str, async_id: str) -> bool:
        self._up()
        kept = [r for r in self.requests if (r.key_id, r.async_id) != (key_id, async_id)]
        removed, self.requests = len(kept) != len(self.requests), kept
        return removed

    async def get_device(self, device_id: str) -> Device | None:
        return self.devices.get(device_id)

    # ---- snapshot ----------------------------------------------------------------------------------------------
    async def get_desired(self, device_id: str, path: str) -> DesiredValue | None:
        return self.desired.get((device_id, path))

    async def set_desired(self, device_id: str, path: str, desired: DesiredValue) -> None:
        self.desired[(device_id, path)] = desired

    async def set_subscribed(self, device_id: str, path: str, subscribed: bool) -> None:
        self._up()
        self.subscribed[(device_id, path)] = subscribed

    async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
        for device_id, path, value in values:
            self.reported[(device_id, path)] = value

    async def get_snapshot(self, device_id: str) -> list[SnapshotResource]:
        paths = {p for d, p in (*self.reported, *self.subscribed) if d == device_id}
        return [
            SnapshotResource(
                path=path,
                reported=self.reported.get((device_id, path)),
                subscribed=self.subscribed.get((device_id, path), False),
            )
            for path in sorted(paths)
        ]

    # ---- subscriptions -----------------------------------------------------------------------------------------
    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None:
        if (key_id, device_id, path) not in self.subscriptions:
            self.subscriptions.append((key_id, device_id, path))

    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool:
        if (key_id, device_id, path) not in self.subscriptions:
            return False
        self.subscriptions.remove((key_id, device_id, path))
        return True

    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]:
        return [p for k, d, p in self.subscriptions if (k, d) == (key_id, device_id)]

    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        kept = [s for s in self.subscriptions if not (s[1] == device_id and key_id in (None, s[0]))]
        removed, self.subscriptions = len(self.subscriptions) - len(kept), kept
        return removed

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        return [(k, p) for k, d, p in self.subscriptions if d == device_id]

    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        return list(self.presubscriptions)


class FakeGateway:
    """The LwM2M server as the domain sees it: registered devices, and answers the test scripts per path (a
    DeviceResponse, or a DeviceError to raise). Every call is recorded; `hold` makes requests wait until released."""

    def __init__(self) -> None:
        self.registered: dict[str, Any] = {}  # device id → its registration (what `registration` returns)
        self.reachable = True
        self.answers: dict[str, DeviceResponse | DeviceError] = {}
        self.calls: list[tuple[str, str, str]] = []  # (what, device id, path)
        self.established: set[tuple[str, str]] = set()  # observations the service holds
        self.hold: asyncio.Event | None = None

    def register(self, device_id: str = DEVICE, *, queue_mode: bool = False, updated_at: float = START) -> None:
        self.registered[device_id] = _Registration(queue_mode, updated_at)

    def registration(self, device_id: str) -> Any:
        return self.registered.get(device_id)

    def connected(self, registration: object) -> bool:
        return self.reachable

    async def request(
        self,
        device_id: str,
        method: str,
        uri: str,
        payload: bytes = b"",
        content_format: int | None = None,
        accept: int | None = None,
    ) -> DeviceResponse:
        self.calls.append((method, device_id, uri))
        if self.hold is not None:
            await self.hold.wait()
        return self._answer(uri, CONTENT if method == "GET" else CHANGED)

    async def observe(self, device_id: str, path: str, accept: int | None = None) -> DeviceResponse:
        self.calls.append(("observe", device_id, path))
        response = self._answer(path, CONTENT)
        if response.success:
            self.established.add((device_id, path))
        return response

    async def cancel_observe(self, device_id: str, path: str) -> None:
        self.calls.append(("cancel", device_id, path))
        self.established.discard((device_id, path))

    def observed(self, device_id: str, path: str) -> bool:
        return (device_id, path) in self.established

    def observing(self, device_id: str, path: str) -> bool:
        return (device_id, path) in self.established

    def split_values(
        self, path: str, content_format: int | None, payload: bytes, content_type: str, definition: object = None
    ) -> list[tuple[str, bytes, str]]:
        return [(path, payload, content_type)]  # a single resource's value: as it came

    def named(self, what: str) -> list[str]:
        """The paths of the calls of one kind, in order."""
        return [path for kind, _, path in self.calls if kind == what]

    def _answer(self, path: str, code: int) -> DeviceResponse:
        answer = self.answers.get(path, DeviceResponse(code, payload=b"v"))
        if isinstance(answer, DeviceError):
            raise answer
        return answer


class _Registration:
    """What the request queue reads of a registration: its queue mode and its last Register or Update."""

    def __init__(self, queue_mode: bool, updated_at: float) -> None:
        self.queue_mode = queue_mode
        self.updated_at = updated_at


class FakeSink:
    """The channel layer as the domain sees it: what was published, to which keys, in order."""

    def __init__(self) -> None:
        self.published: list[tuple[tuple[str, ...], Event]] = []

    async def publish(self, key_ids: Sequence[str], event: Event) -> None:
        self.published.append((tuple(key_ids), event))

    async def publish_many(self, events: Sequence[tuple[Sequence[str], Event]]) -> None:
        for key_ids, event in events:
            await self.publish(key_ids, event)

    async def publish_account(self, account_id: str, event: Event) -> None:
        self.published.append(((account_id,), event))

    def responses(self) -> list[AsyncResponseEvent]:
        return [e for _, e in self.published if isinstance(e, AsyncResponseEvent)]

    def notifications(self) -> list[tuple[tuple[str, ...], NotificationEvent]]:
        return [(keys, e) for keys, e in self.published if isinstance(e, NotificationEvent)]
