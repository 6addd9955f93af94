"""Redis mode: the node holding each device, and device-bound work handed to it (domain/handover.py, issue 31 #1).

`holder:<device>` names the node that took the device's latest Register or Update. It is written when a node takes
a device it did not hold (one SET per such device, none per Update); the write returns the previous holder, which
is told to let the device go. Work for a device held elsewhere is added to the holder's stream `work:<node>`, read by
the holder through a consumer group: an entry stays pending until the holder has done it and acknowledged it
(XACK), so work added while the holder was briefly cut off from Redis is read when it is back, and work read but
not done before a crash is read again at the node's restart (same --node-id). A node is alive while its heartbeat
key `alive:<node>` exists (refreshed every `BEAT_S`, gone `ALIVE_TTL_S` after the node stops refreshing it, deleted
at a graceful stop, with the stream when nothing is left in it); work for a node not alive is not added: it waits
for the device's next contact, as it did before hand-overs, and `orphaned` counts it. Work handed to a node that
dies before doing it (added while its heartbeat still ran, or read and never acknowledged) is taken over by the
device's next node (issue 31 #4): when a node takes a device whose holder is gone, it claims that node's undone
entries for the device (XDEL decides which node claims an entry: the one whose XDEL removed it) and does them, so
an observe handed to a dying node is made and answered, not lost with it. (A request is safe either way: it stays
queued in the store until answered, and the device's next node delivers its queue.) An observe or a cancel taken
once the holder's heartbeat has run out waits in the device's list `pending:<device>` (park_work.lua, while the
holder record still names the gone node), and the node that takes the device next takes the list with its holder
record in one step (take_holder.lua) and does it: the subscription is answered when the device is back, as a queued
request is, not with an error from a node that cannot reach the device behind the front. Work that names an expiry
is also indexed by it (`waiting`): when the device has not come back by then, the node whose LREM takes the entry out
of the device's list (`expired_waiting`) answers it, as an expired request is answered, and the list is kept
`SWEEP_GRACE_S` past the latest expiry so that no entry runs out unanswered before the sweep meets it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError, ResponseError

from devicehub import tasks
from devicehub.domain.handover import CANCEL, OBSERVE, DeviceWork
from devicehub.store.redis.writes import GROUP_DEVICES

log = logging.getLogger("devicehub.holders")

GROUP = "holder"
STREAM_MAX = 10_000  # entries a node's stream keeps (approximately, MAXLEN ~): a node gone for good grows no further
READ_COUNT = 100
BLOCK_MS = 1000  # one read waits this long for work (below any Redis socket time-out)
BEAT_S = 1.0
ALIVE_TTL_S = 5.0  # a node that stopped refreshing its heartbeat this long ago is gone (cluster.py's LEASE_TTL)
RETRY_S = 0.5
RELEASE = "release"  # internal: another node took the device; never reaches the domain
WAITING_KINDS = frozenset({OBSERVE, CANCEL})  # what waits for a device no live node holds (a request's queue waits
# in the store already; a firmware update is handed again by its campaign)
WAIT_S = 7200.0  # how long such work waits when it names no expiry (a device request's default, service.py)
SWEEP_GRACE_S = 300.0  # a waiting list outlives its latest expiry by this much: the sweep (once a second) answers it

_LUA = Path(__file__).with_name("lua")
_HAND_OVER = (_LUA / "hand_over.lua").read_text()
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(DeviceWork).decode

WorkHandler = Callable[[DeviceWork], Awaitable[None]]


def _entry_id(text: str) -> tuple[int, int]:
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HolderLink:
    """Implements domain.handover.DeviceHolders on one Redis."""

    def __init__(self, redis: aioredis.Redis | RedisCluster, prefix: str, node_id: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self.node_id = node_id
        self._held: set[str] = set()  # devices this node took and no other node took since
        self._hand_over = redis.register_script(_HAND_OVER)
        self._release = redis.register_script((_LUA / "release_holder.lua").read_text())
        self._park = redis.register_script((_LUA / "park_work.lua").read_text())
        self._take_holder = (_LUA / "take_holder.lua").read_text()
        self._reader: asyncio.Task[None] | None = None
        self._handler: WorkHandler | None = None
        self._salvages: set[asyncio.Task[None]] = set()  # claims of dead holders' work (issue 31 #4)
        # devices taken from each previous holder, gathered for its next claim: a storm of Registers after a node's
        # death makes one scan of its stream per moment, not one per registration batch
        self._to_salvage: dict[str, set[str]] = {}
        self._closing = False
        self._beaten_at = float("-inf")
        self.sent = 0  # work handed to another node
        self.orphaned = 0  # work whose device's holder is gone: left for the device's next contact
        self.taken = 0  # work other nodes handed to this one, done
        self.salvaged = 0  # work handed to a node that died before doing it, done here
        self.waited = 0  # work that waited for a device no live node held, taken here with the device
        self.expired = 0  # work that waited for such a device past its expiry, taken out here to be answered

    # hash tags (store/redis/keys.py): the holder record in its device's slot; a node's heartbeat and stream in one
    # slot of their own, which hand_over.lua checks and adds to in one step
    def _holder_key(self, device_id: str) -> str:
        return f"{self._prefix}holder:{{dev:{device_id}}}"

    def _stream(self, node_id: str) -> str:
        return f"{self._prefix}work:{{node:{node_id}}}"

    def _pending(self, device_id: str) -> str:
        return f"{self._prefix}pending:{{dev:{device_id}}}"

    def _alive(self, node_id: str) -> str:
        return f"{self._prefix}alive:{{node:{node_id}}}"

    def _waiting(self) -> str:
        # one key, not a bucketed index (keys.py): it holds only work left for devices whose holder died, a handful
        return f"{self._prefix}waiting:{{waiting}}"

    # ---- lifecycle ------------------------------------------------------------------------------
    async def start(self, handler: WorkHandler) -> None:
        """Be alive, and do the work handed to this node with `handler` (work left pending by a previous run of this
        node id first)."""
        try:
            await self._redis.xgroup_create(self._stream(self.node_id), GROUP, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" not in str(error):  # the group exists: this node id ran before
                raise
        await self._beat()
        self._handler = handler
        self._reader = asyncio.create_task(self._read(handler), name="device-work")

    async def close(self) -> None:
        self._closing = True  # redis-py may turn the cancel of a blocked read into a ConnectionError: not retried
        if self._reader is not None:
            await tasks.stop(self._reader)
        if self._salvages:
            await tasks.stop(*self._salvages)
        try:  # gone at once: other nodes stop handing work here (its devices wait for their next contact)
            await self._redis.delete(self._alive(self.node_id))
            await self._drop_empty_stream()
        except RedisError as error:
            log.info("heartbeat not removed at stop (%s): it runs out in %.0f s", error, ALIVE_TTL_S)

    async def _drop_empty_stream(self) -> None:
        """A stream with nothing left to do goes with its node: a node id made per process (host:pid) never reads
        it again. Nothing is added once the heartbeat is gone (`hand_over.lua` checks it), so what the group shows
        now is all there is; work left in it stays for a restart under the same --node-id."""
        stream = self._stream(self.node_id)
        groups = await self._redis.xinfo_groups(stream)
        done = [g for g in groups if _text(g.get("name")) == GROUP and g.get("pending") == 0 and g.get("lag") == 0]
        if len(groups) == 1 and done:
            await self._redis.delete(stream)

    def metrics(self) -> dict[str, float]:
        return {
            "handover_sent": self.sent,
            "handover_orphaned": self.orphaned,
            "handover_taken": self.taken,
            "handover_salvaged": self.salvaged,
            "handover_waited": self.waited,
            "handover_expired": self.expired,
        }

    # ---- DeviceHolders ----------------------------------------------------------------------------
    def holds(self, device_id: str) -> bool:
        return device_id in self._held

    async def held_elsewhere(self, device_id: str) -> bool:
        if device_id in self._held:
            return False
        holder = await self._redis.get(self._holder_key(device_id))
        node = None if holder is None else _text(holder)
        return node is not None and node != self.node_id and bool(await self._redis.exists(self._alive(node)))

    async def took(self, device_ids: Sequence[str]) -> list[DeviceWork]:
        new = [d for d in device_ids if d not in self._held]
        if not new:
            return []
        self._held.update(new)
        # a device per call on a cluster (its slot); on one Redis a group of devices per call (issue 30 #5: a command
        # costs the node ~12 µs in redis-py besides its arguments, and this script's text travels with each). EVAL: a
        # cluster's pipeline loads no script on the node it reaches
        size = 1 if isinstance(self._redis, RedisCluster) else GROUP_DEVICES
        async with self._redis.pipeline(transaction=False) as pipe:
            for start in range(0, len(new), size):
                keys = [k for d in new[start : start + size] for k in (self._holder_key(d), self._pending(d))]
                pipe.eval(self._take_holder, len(keys), *keys, self.node_id)
            taken = [device for group in await pipe.execute() for device in group]
        released: dict[str, list[str]] = {}
        came: list[DeviceWork] = []  # work that waited for these devices
        for device_id, (node, pending) in zip(new, taken, strict=True):
            if node is not None and _text(node) != self.node_id:
                released.setdefault(_text(node), []).append(device_id)
            for entry in pending:
                try:
                    came.append(_decode(entry))
                except msgspec.DecodeError:
                    log.warning("malformed waiting work of %s dropped: %r", device_id, entry)
        self.waited += len(came)
        if released:  # the nodes that held them reach them no more: they must not think they do (if alive)
            async with self._redis.pipeline(transaction=False) as pipe:
                for node, devices in released.items():
                    keys = [self._alive(node), self._stream(node)]
                    for device_id in devices:  # EVAL: a cluster's pipeline loads no script on the node it reaches
                        pipe.eval(_HAND_OVER, 2, *keys, STREAM_MAX, _encode(DeviceWork(RELEASE, device_id)))
                added = await pipe.execute()
            told = [node for node, devices in released.items() for _ in devices]  # one RELEASE per device
            gone = {node for node, done in zip(told, added, strict=True) if not done}
            for node, devices in released.items():  # a node killed may still look alive (ALIVE_TTL_S): checked then
                waiting = self._to_salvage.get(node)
                if waiting is not None:
                    waiting.update(devices)
                    continue
                self._to_salvage[node] = set(devices)
                task = asyncio.create_task(self._salvage(node, node in gone), name="device-work-salvage")
                self._salvages.add(task)
                task.add_done_callback(self._salvages.discard)
        return came

    async def released(self, device_id: str) -> None:
        if device_id in self._held:
            self._held.discard(device_id)
            await self._release(keys=[self._holder_key(device_id)], args=[self.node_id])

    async def hand_over(self, work: DeviceWork) -> bool:
        if work.device_id in self._held:
            return False
        try:
            for _ in range(3):  # again only when a node took the device between the reads (park_work.lua)
                holder = await self._redis.get(self._holder_key(work.device_id))
                node = None if holder is None else _text(holder)
                if node is None or node == self.node_id:
                    return False
                keys = [self._alive(node), self._stream(node)]
                if await self._hand_over(keys=keys, args=[STREAM_MAX, _encode(work)]):
                    self.sent += 1
                    return True
                if work.kind not in WAITING_KINDS:
                    break
                if await self._wait_for_device(work, node):
                    self.orphaned += 1
                    log.info("%s of %s waits for the device: its node %s is gone", work.kind, work.device_id, node)
                    return True
        except RedisError as error:  # done here, or left for the device's next contact, as without hand-overs
            log.info("%s of %s not handed over: %s", work.kind, work.device_id, error)
            return False
        self.orphaned += 1
        log.info("%s of %s waits for the device: its node is gone", work.kind, work.device_id)
        return False

    async def _wait_for_device(self, work: DeviceWork, gone: str) -> bool:
        """Leave `work` in the device's pending list while its holder record names `gone` (False: a node took the
        device meanwhile), kept until the work expires (service-spec §4: a command waits until the device can
        receive it, up to its expiry)."""
        expires_at = work.expires_at or time.time() + WAIT_S
        keep_ms = max(1, int((expires_at + SWEEP_GRACE_S - time.time()) * 1000))
        keys = [self._holder_key(work.device_id), self._pending(work.device_id)]
        entry = _encode(work)
        if not await self._park(keys=keys, args=[gone, entry, keep_ms]):
            return False
        if work.expires_at:  # indexed after it is parked: a sweep in between finds nothing yet, not a lost entry
            try:
                await self._redis.zadd(self._waiting(), {entry: work.expires_at})
            except RedisError as error:  # it waits all the same (parked): only its answer at expiry is lost
                log.warning("%s of %s waits unindexed, unanswered if it expires: %s", work.kind, work.device_id, error)
        return True

    async def expired_waiting(self, now: float) -> list[DeviceWork]:
        """Work left waiting for its device past its expiry (`now`, wall-clock seconds), each taken out of the device's
        list by this node: LREM removes an entry once, so of the nodes sweeping and the node taking the device
        (take_holder.lua) exactly one has it. An entry whose device was taken first is only dropped from the index."""
        index = self._waiting()
        try:
            entries: list[Any] = list(await self._redis.zrangebyscore(index, "-inf", now, start=0, num=READ_COUNT))
            if not entries:
                return []
            readable: list[tuple[Any, DeviceWork]] = []
            for entry in entries:
                try:
                    readable.append((entry, _decode(entry)))
                except msgspec.DecodeError:
                    log.warning("malformed waiting work dropped from the index: %r", entry)
            async with self._redis.pipeline(transaction=False) as pipe:
                for entry, work in readable:
                    pipe.lrem(self._pending(work.device_id), 1, entry)
                removed = await pipe.execute()
            taken = [work for (_, work), count in zip(readable, removed, strict=True) if count]
            await self._redis.zrem(index, *entries)
        except RedisError as error:  # swept on a later pass (the list outlives its expiry by SWEEP_GRACE_S)
            log.info("waiting work not swept: %s", error)
            return []
        self.expired += len(taken)
        return taken

    async def _salvage(self, node: str, gone: bool) -> None:
        """Issue 31 #4: `node` held the devices in `_to_salvage[node]` until this node took them. Once it is gone (its
        heartbeat ran out), the work it was handed for them and did not do is claimed and done here."""
        try:
            gone = gone or await self._runs_out(node)
        except RedisError as error:
            log.info("heartbeat of %s not read: %s", node, error)
            gone = False
        devices = self._to_salvage.pop(node, set())  # taken now: a device taken later starts a claim of its own
        if not gone:
            return
        try:
            claims = await self._claim(node, devices)
        except RedisError as error:  # left for the device's next contact, as before hand-overs
            log.info("work left by %s not claimed: %s", node, error)
            return
        handler = self._handler
        for work in claims:
            log.info("%s of %s handed to %s, which died: done here", work.kind, work.device_id, node)
            if handler is not None:
                try:
                    await handler(work)
                except Exception:
                    log.exception("device work %s of %s failed", work.kind, work.device_id)
            self.salvaged += 1

    async def _runs_out(self, node: str) -> bool:
        """Whether `node`'s heartbeat is gone within ALIVE_TTL_S (False: a live node that let its device go; it was
        told so, RELEASE, and its work is its own)."""
        deadline = time.monotonic() + ALIVE_TTL_S + BEAT_S
        while await self._redis.exists(self._alive(node)):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(BEAT_S)
        return True

    async def _claim(self, node: str, devices: set[str]) -> list[DeviceWork]:
        """The entries of `node`'s stream for `devices` that it had not done (added after its group's last read, or
        read and never acknowledged: a kill mid-work), each removed by this node (XDEL: whoever removes it does it)."""
        stream = self._stream(node)
        if not devices or not await self._redis.exists(stream):
            return []  # a node stopped gracefully leaves no stream with work in it
        groups = [g for g in await self._redis.xinfo_groups(stream) if _text(g.get("name")) == GROUP]
        if not groups:
            return []
        read_up_to = _entry_id(_text(groups[0].get("last-delivered-id", "0-0")))
        unacked = {
            _text(p["message_id"])
            for p in await self._redis.xpending_range(stream, GROUP, min="-", max="+", count=STREAM_MAX)
        }
        entries: Any = await self._redis.xrange(stream, count=STREAM_MAX)
        claims: list[tuple[Any, DeviceWork]] = []
        for entry_id, fields in entries:
            text = _text(entry_id)
            if not fields or (text not in unacked and _entry_id(text) <= read_up_to):
                continue  # done by its node
            try:
                work = _decode(fields[b"w"])
            except (KeyError, msgspec.DecodeError):
                continue
            if work.kind != RELEASE and work.device_id in devices:
                claims.append((entry_id, work))
        if not claims:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for entry_id, _ in claims:
                pipe.xdel(stream, entry_id)
            removed = await pipe.execute()
        # another node that took one of these devices may have claimed an entry first
        return [work for (_, work), claimed in zip(claims, removed, strict=True) if claimed]

    # ---- the holder's side ------------------------------------------------------------------------
    async def _beat(self) -> None:
        now = time.monotonic()
        if now - self._beaten_at >= BEAT_S:
            await self._redis.set(self._alive(self.node_id), "1", px=int(ALIVE_TTL_S * 1000))
            self._beaten_at = now

    async def _read(self, handler: WorkHandler) -> None:
        stream = self._stream(self.node_id)
        position = "0"  # first what was read before and never acknowledged (a crash), then new work (">")
        failing = False
        while not self._closing:
            try:
                await self._beat()
                block = BLOCK_MS if position == ">" else None
                reply: Any = await self._redis.xreadgroup(
                    GROUP, self.node_id, {stream: position}, count=READ_COUNT, block=block
                )
            except (RedisError, OSError) as error:
                if self._closing:
                    return
                if not failing:
                    log.warning("device work stream unreadable (%s); retrying", error)
                failing = True
                await asyncio.sleep(RETRY_S)
                continue
            if failing:
                log.info("device work stream back")
                failing = False
            entries = reply[0][1] if reply else []
            if not entries and position == "0":
                position = ">"
                continue
            for entry_id, fields in entries:
                await self._do(handler, fields)
                try:
                    await self._redis.xack(stream, GROUP, entry_id)
                except (RedisError, OSError) as error:  # read again after a restart: the work is idempotent
                    log.info("device work %s not acknowledged: %s", entry_id, error)

    async def _do(self, handler: WorkHandler, fields: dict[bytes, bytes] | None) -> None:
        if not fields:  # deleted after it was read (another node claimed it: issue 31 #4): nothing to do
            return
        try:
            work = _decode(fields[b"w"])
        except (KeyError, msgspec.DecodeError):
            log.warning("malformed device work entry dropped: %r", fields)
            return
        if work.kind == RELEASE:
            self._held.discard(work.device_id)
            return
        try:
            await handler(work)
        except Exception:
            log.exception("device work %s of %s failed", work.kind, work.device_id)
        self.taken += 1
