"""The device-request queue on its own (issue 29 #10): delivery, order, reachability, retries, expiry and desired
values, on fakes of the store, the gateway and the channel layer, with a manual clock and no socket."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from domain_fakes import DEVICE, START, FakeGateway, FakeSink, FakeStore, request

from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceResponse, DeviceTimeout
from devicehub.domain.handover import CANCEL, OBSERVE, DeviceWork
from devicehub.domain.requests import FAILURE, PENDING, SUCCESS, RequestQueue
from devicehub.domain.subscriptions import SubscriptionRouter
from support.waiting import eventually


class Queue:
    """A request queue wired to the fakes."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.store, self.gateway, self.sink = FakeStore(), FakeGateway(), FakeSink()
        store = self.store.as_store()
        router = SubscriptionRouter(store, self.clock, self.gateway, self.sink)
        self.queue = RequestQueue(store, self.clock, self.gateway, self.sink, router)

    async def settled(self) -> None:
        """Until no worker is on any device's queue."""
        await eventually(lambda: not self.queue.draining(), what="the queue's workers done")


def test_a_request_to_a_reachable_device_is_sent_answered_to_its_key_and_leaves_the_queue() -> None:
    async def main() -> None:
        q = Queue()
        q.gateway.register()
        await q.queue.submit(request("r1"))
        await q.settled()
        assert q.gateway.calls == [("GET", DEVICE, "/3/0/0")]
        [(keys, answer)] = q.sink.published
        assert keys == ("k1",) and (answer.async_id, answer.status, answer.payload) == ("r1", 200, b"v")  # type: ignore[attr-defined]
        assert q.store.requests == []

    asyncio.run(main())


def test_a_devices_requests_go_one_at_a_time_in_the_order_they_were_queued() -> None:
    async def main() -> None:
        q = Queue()
        q.gateway.register()
        q.gateway.hold = asyncio.Event()
        for n in range(3):
            await q.queue.submit(request(f"r{n}", uri=f"/3/0/{n}"))
        await eventually(lambda: q.gateway.calls)
        assert q.gateway.named("GET") == ["/3/0/0"]  # the next waits for the first's answer
        q.gateway.hold.set()
        await q.settled()
        assert q.gateway.named("GET") == ["/3/0/0", "/3/0/1", "/3/0/2"]
        assert [r.async_id for r in q.sink.responses()] == ["r0", "r1", "r2"]

    asyncio.run(main())


def test_a_request_to_an_unregistered_device_waits_in_the_queue_until_a_kick() -> None:
    async def main() -> None:
        q = Queue()
        await q.queue.submit(request("r1"))
        await q.settled()
        assert q.gateway.calls == [] and [r.async_id for r in q.store.requests] == ["r1"]
        q.gateway.register()  # the device registers: the LwM2M layer kicks its queue
        q.queue.kick(DEVICE)
        await q.settled()
        assert q.gateway.named("GET") == ["/3/0/0"] and q.store.requests == []

    asyncio.run(main())


def test_a_queue_mode_device_is_sent_requests_only_within_30_s_of_its_last_update() -> None:
    async def main() -> None:
        q = Queue()
        q.gateway.register(queue_mode=True, updated_at=START)
        await q.clock.advance(30)  # LwM2M 1.1 §6.5: it stopped listening
        await q.queue.submit(request("r1"))
        await q.settled()
        assert q.gateway.calls == []
        q.gateway.register(queue_mode=True, updated_at=q.clock.now())  # it sends an Update
        q.queue.kick(DEVICE)
        await q.settled()
        assert q.gateway.named("GET") == ["/3/0/0"]

    asyncio.run(main())


def test_a_failing_request_is_tried_once_more_per_retry_left_before_its_key_is_answered() -> None:
    async def main() -> None:
        q = Queue()
        q.gateway.register()
        q.gateway.answers["/3/0/0"] = DeviceTimeout("silent")
        await q.queue.submit(request("r1", retries_left=2))
        await q.settled()
        assert q.gateway.named("GET") == ["/3/0/0"] * 3
        assert [(r.async_id, r.status) for r in q.sink.responses()] == [("r1", 504)] and q.store.requests == []

    asyncio.run(main())


def test_a_failed_attempt_without_retries_answers_the_key_with_the_failures_status_and_token() -> None:
    async def main() -> None:
        q = Queue()
        q.gateway.register()
        q.gateway.answers["/3/0/0"] = DeviceTimeout("silent")
        await q.queue.submit(request("r1"))
        await q.settled()
        [answer] = q.sink.responses()
        assert (answer.status, answer.error) == (504, "TIMEOUT") and q.store.requests == []

    asyncio.run(main())


def test_a_request_past_its_expiry_is_failed_429_by_the_expiry_pass_of_the_clock() -> None:
    async def main() -> None:
        q = Queue()
        await q.queue.start()
        try:
            await q.queue.submit(request("r1", expires_at=START + 10))  # unregistered: it waits
            await q.settled()
            await q.clock.advance(9)
            assert q.sink.published == []
            await q.clock.advance(2)
            await eventually(lambda: q.sink.published)
            [answer] = q.sink.responses()
            assert (answer.status, answer.error) == (429, "REQUEST_EXPIRED") and q.store.requests == []
        finally:
            await q.queue.stop()

    asyncio.run(main())


class WaitingWork:
    """The DeviceHolders port with work left waiting for devices no live node holds (store/redis/holders.py keeps it
    in Redis): the expiry pass takes out what is past its expiry."""

    node_id = "node-a"

    def __init__(self, *waiting: DeviceWork) -> None:
        self.waiting = list(waiting)

    def holds(self, device_id: str) -> bool:
        return False

    async def held_elsewhere(self, device_id: str) -> bool:
        return False

    async def took(self, device_ids: Sequence[str]) -> list[DeviceWork]:
        return []

    async def released(self, device_id: str) -> None:
        pass

    async def hand_over(self, work: DeviceWork) -> bool:
        return False

    async def expired_waiting(self, now: float) -> list[DeviceWork]:
        expired = [w for w in self.waiting if w.expires_at and w.expires_at <= now]
        self.waiting = [w for w in self.waiting if w not in expired]
        return expired


def test_a_subscription_that_waited_for_a_device_that_never_came_back_is_answered_429_at_its_expiry() -> None:
    """Issue 31 #4's leftover: such an observe was never answered. The expiry pass answers it REQUEST_EXPIRED to its
    key, as an expired request is; a cancel that waited is owed no answer, and what has not expired keeps waiting."""

    async def main() -> None:
        clock = ManualClock()
        store, gateway, sink = FakeStore(), FakeGateway(), FakeSink()
        router = SubscriptionRouter(store.as_store(), clock, gateway, sink)
        observe = DeviceWork(OBSERVE, DEVICE, key_id="k1", pattern="/3/0/9", async_id="s1", expires_at=START + 10)
        cancel = DeviceWork(CANCEL, DEVICE, key_id="k1", pattern="/3/0/7", expires_at=START + 10)
        later = DeviceWork(OBSERVE, DEVICE, key_id="k2", pattern="/3/0/9", async_id="s2", expires_at=START + 100)
        holders = WaitingWork(observe, cancel, later)
        queue = RequestQueue(store.as_store(), clock, gateway, sink, router, holders=holders)
        await queue.start()
        try:
            await clock.advance(9)
            assert sink.published == []
            await clock.advance(2)
            await eventually(lambda: sink.published)
            [(keys, answer)] = sink.published
            assert keys == ("k1",)
            assert (answer.async_id, answer.status, answer.error, answer.device_id) == (  # type: ignore[attr-defined]
                "s1",
                429,
                "REQUEST_EXPIRED",
                DEVICE,
            )
            assert holders.waiting == [later] and gateway.calls == []  # nothing was sent to the device
        finally:
            await queue.stop()

    asyncio.run(main())


def test_a_write_makes_its_desired_value_pending_when_queued_and_successful_when_answered() -> None:
    async def main() -> None:
        q = Queue()
        await q.queue.submit(request("w1", method="PUT", uri="/3311/0/5851", payload=b"42"))
        pending = q.store.desired[(DEVICE, "/3311/0/5851")]
        assert (pending.value, pending.status, pending.request_id) == (b"42", PENDING, "k1/w1")
        q.gateway.register()
        q.queue.kick(DEVICE)
        await q.settled()
        done = q.store.desired[(DEVICE, "/3311/0/5851")]
        assert (done.value, done.status, done.last_success) == (b"42", SUCCESS, None)

    asyncio.run(main())


def test_a_refused_write_is_a_failure_that_keeps_the_value_the_device_last_accepted() -> None:
    async def main() -> None:
        q = Queue()
        q.gateway.register()
        await q.queue.submit(request("w1", method="PUT", uri="/3311/0/5851", payload=b"1"))
        await q.settled()
        q.gateway.answers["/3311/0/5851"] = DeviceResponse(0x80)  # 4.00
        await q.queue.submit(request("w2", method="PUT", uri="/3311/0/5851", payload=b"2"))
        await q.settled()
        desired = q.store.desired[(DEVICE, "/3311/0/5851")]
        assert (desired.value, desired.status) == (b"2", FAILURE)
        assert desired.last_success is not None and desired.last_success.value == b"1"

    asyncio.run(main())


def test_a_kick_of_many_devices_while_the_store_is_down_is_counted_and_leaves_their_requests_queued() -> None:
    async def main() -> None:
        q = Queue()
        await q.queue.submit(request("r1"))
        await q.settled()
        q.gateway.register()
        q.store.down = True
        await q.queue.kick_many([DEVICE])
        assert q.queue.store_misses == 1 and q.gateway.calls == []
        q.store.down = False
        assert [r.async_id for r in q.store.requests] == ["r1"]

    asyncio.run(main())


def test_forgetting_a_device_stops_its_worker_and_returns_what_still_waited() -> None:
    async def main() -> None:
        q = Queue()
        q.gateway.register()
        q.gateway.hold = asyncio.Event()
        await q.queue.submit(request("r1"))
        await q.queue.submit(request("r2"))
        await eventually(lambda: q.gateway.calls)
        waiting = await q.queue.forget(DEVICE)
        assert [r.async_id for r in waiting] == ["r1", "r2"] and not q.queue.draining()

    asyncio.run(main())
