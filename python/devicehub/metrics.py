"""Prometheus metrics of one service node, in their own CollectorRegistry (several nodes can share a process).

Counters the other modules already keep (LwM2M server and CoAP endpoint stats, channel hub counters) are read at
scrape time by `_NodeCollector`; what needs a hook (HTTP requests, callback PUT latency) is observed here.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from devicehub.domain.events import (
    KIND_ASYNC_RESPONSE,
    KIND_DE_REGISTRATION,
    KIND_FIRMWARE_UPDATE,
    KIND_NOTIFICATION,
    KIND_REG_UPDATE,
    KIND_REGISTRATION,
    KIND_REGISTRATIONS_EXPIRED,
)

if TYPE_CHECKING:
    from devicehub._core import Batch
    from devicehub.channels.hub import ChannelHub

EVENT_KINDS = {
    KIND_NOTIFICATION: "notification",
    KIND_REGISTRATION: "registration",
    KIND_REG_UPDATE: "registration-update",
    KIND_DE_REGISTRATION: "de-registration",
    KIND_REGISTRATIONS_EXPIRED: "registration-expired",
    KIND_ASYNC_RESPONSE: "async-response",
    KIND_FIRMWARE_UPDATE: "firmware-update",
}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# the LwM2M server's CoAP endpoints, by the prefix of their figures in `LwM2MServer.metrics()`
COAP_LISTENERS = ("coap", "coaps", "coap_tcp", "coaps_tcp")
TOP_QUEUES = 10  # per-channel queue gauges for the largest queues only: the label set stays bounded
DELIVERY_BOUNDS_MS = [
    1,
    2,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    3_600_000,
]
CHANNEL_KINDS = ("callback", "websocket", "pull")  # channels/channel.py CALLBACK, WEBSOCKET, PULL
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PendingRequests(Protocol):
    async def count_pending_requests(self) -> int: ...


class MetricSources(Protocol):
    """What the collector reads at scrape time; the API's `Services` is one (metrics is a view below the API,
    so it names what it reads rather than importing the API)."""

    @property
    def store(self) -> PendingRequests: ...

    @property
    def hub(self) -> ChannelHub: ...

    @property
    def extra_metrics(self) -> Callable[[], dict[str, float]] | None: ...


class NodeMetrics:
    """The metrics of one node: a registry, the hooks that feed it and the scrape-time collector."""

    def __init__(self, services: MetricSources) -> None:
        self.services = services
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "devicehub_http_requests",
            "HTTP API requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "devicehub_http_request_duration_seconds",
            "Time to answer an HTTP API request, by method and route template",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.callback_attempts = Counter(
            "devicehub_callback_attempts", "Callback PUTs sent (deliveries and verifications)", registry=self.registry
        )
        self.callback_failures = Counter(
            "devicehub_callback_failures",
            "Callback PUTs not answered 2xx, by cause",
            ["cause"],
            registry=self.registry,
        )
        self.callback_latency = Histogram(
            "devicehub_callback_duration_seconds",
            "Time from sending a callback PUT to its answer (or giving up)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        # counted per delivered batch in the Rust core (Batch.count_waits), exported by _NodeCollector
        # per channel kind (issue 34 #6); the unlabelled histogram is their sum
        self.delivery_waits_by_kind = {k: [0] * (len(DELIVERY_BOUNDS_MS) + 1) for k in CHANNEL_KINDS}
        self.delivery_wait_sum_ms_by_kind = dict.fromkeys(CHANNEL_KINDS, 0)
        self.pending_requests = 0  # refreshed before each scrape (a store read, so async)
        ProcessCollector(namespace="devicehub", registry=self.registry)  # memory, CPU seconds, open files
        self.registry.register(_NodeCollector(self))

    def callback_answered(self, seconds: float, status: int | None, timed_out: bool) -> None:
        """Hook of channels/callback.py's CallbackClient: one call per PUT."""
        self.callback_attempts.inc()
        self.callback_latency.observe(seconds)
        if status is None or not 200 <= status < 300:
            cause = "timeout" if timed_out else "unreachable" if status is None else f"{status // 100}xx"
            self.callback_failures.labels(cause).inc()

    def events_delivered(self, batch: Batch, now: float, kind: str) -> None:
        """Hook of the channel hub: one call per delivered batch, with the channel's kind."""
        waits = self.delivery_waits_by_kind.get(kind)
        if waits is None:
            return
        waits, waited_ms = batch.count_waits(int(now * 1000), DELIVERY_BOUNDS_MS, waits)
        self.delivery_waits_by_kind[kind] = waits
        self.delivery_wait_sum_ms_by_kind[kind] += waited_ms

    @property
    def delivery_waits(self) -> list[int]:
        return [sum(column) for column in zip(*self.delivery_waits_by_kind.values(), strict=True)]

    @property
    def delivery_wait_sum_ms(self) -> int:
        return sum(self.delivery_wait_sum_ms_by_kind.values())

    async def scrape(self) -> bytes:
        self.pending_requests = await self.services.store.count_pending_requests()
        return generate_latest(self.registry)

    def request_recorder(self) -> Callable[[web.Request, int, float], None]:
        """`record(request, status, started)` counts an API request and its latency since `started`
        (`time.perf_counter()`); the API edge calls it once per request (edge.py)."""
        # (method, route, status) → its counter and histogram children: `labels()` per request (a lock, the label
        # tuple checked and joined) was 1.5 % of the event loop's samples under the device-request bench
        series: dict[tuple[str, str, int], tuple[Any, Any]] = {}

        def record(request: web.Request, status: int, started: float) -> None:
            key = (request.method, _route(request), status)
            children = series.get(key)
            if children is None:  # the label set is bounded (methods × route templates × statuses)
                children = series[key] = (
                    self.http_requests.labels(key[0], key[1], str(status)),
                    self.http_latency.labels(key[0], key[1]),
                )
            children[0].inc()
            children[1].observe(time.perf_counter() - started)

        return record


def _route(request: web.Request) -> str:
    """The route template (`/v2/endpoints/{device_id}`), never the raw path: the label set stays bounded."""
    info = request.match_info
    resource = info.route.resource if info.http_exception is None else None
    return resource.canonical if resource is not None else "unmatched"


def _counter(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=list(labels) if labels else None)
    family.add_metric(list(labels.values()) if labels else [], value)
    return family


class _NodeCollector(Collector):
    """Reads the counters the LwM2M server, the CoAP endpoint and the channel hub keep, at scrape time."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self._metrics = metrics

    def _delivery_latency(self) -> HistogramMetricFamily:
        m = self._metrics
        cumulative = list(itertools.accumulate(m.delivery_waits))
        buckets = [(repr(bound / 1000), count) for bound, count in zip(DELIVERY_BOUNDS_MS, cumulative, strict=False)]
        buckets.append(("+Inf", cumulative[-1]))
        return HistogramMetricFamily(
            "devicehub_event_delivery_latency_seconds",
            "Device to application inside the service: from an event's arrival (queued) to the application's "
            "transport taking it (WebSocket frame written, callback answered 2xx, long poll answered)",
            buckets=buckets,
            sum_value=m.delivery_wait_sum_ms / 1000,
        )

    def _delivery_latency_by_kind(self) -> HistogramMetricFamily:
        m = self._metrics
        family = HistogramMetricFamily(
            "devicehub_event_delivery_latency_by_kind_seconds",
            "devicehub_event_delivery_latency_seconds by channel kind (callback, websocket, pull)",
            labels=["kind"],
        )
        for kind, waits in m.delivery_waits_by_kind.items():
            cumulative = list(itertools.accumulate(waits))
            buckets = [(repr(b / 1000), c) for b, c in zip(DELIVERY_BOUNDS_MS, cumulative, strict=False)]
            buckets.append(("+Inf", cumulative[-1]))
            family.add_metric([kind], buckets, sum_value=m.delivery_wait_sum_ms_by_kind[kind] / 1000)
        return family

    def collect(self) -> Iterator[Metric]:
        services = self._metrics.services
        lw = services.extra_metrics() if services.extra_metrics is not None else {}
        hub = services.hub.metrics()
        yield self._delivery_latency()
        yield self._delivery_latency_by_kind()

        def v(values: dict[str, Any], name: str) -> float:
            return float(values.get(name, 0))

        registrations = CounterMetricFamily(
            "devicehub_registrations", "LwM2M Register requests, by outcome", labels=["outcome"]
        )
        registrations.add_metric(["accepted"], v(lw, "lwm2m_registrations"))
        registrations.add_metric(["refused"], v(lw, "lwm2m_refused"))
        # answered 5.03 + Max-Age: the registration backlog was full (issue 16 #2, issue 14 #5)
        registrations.add_metric(["shed"], v(lw, "lwm2m_registrations_shed"))
        yield registrations
        backlog = GaugeMetricFamily(
            "devicehub_registration_backlog", "Registrations admitted and answered, not yet stored"
        )
        backlog.add_metric([], v(lw, "lwm2m_registration_backlog"))
        yield backlog
        yield from _dtls_families(lw)
        yield from _bootstrap_families(lw)
        yield from _firmware_families(lw)
        yield _counter(
            "devicehub_registration_batches",
            "Batches of registrations written to the store (registrations / batches: the batch size)",
            v(lw, "lwm2m_registration_batches"),
        )
        yield _counter("devicehub_registration_updates", "LwM2M registration updates", v(lw, "lwm2m_updates"))
        yield _counter("devicehub_deregistrations", "LwM2M de-registrations", v(lw, "lwm2m_deregistrations"))
        yield _counter("devicehub_registration_expiries", "Registrations expired", v(lw, "lwm2m_expirations"))
        registered = GaugeMetricFamily("devicehub_registered_devices", "Devices registered with this node")
        registered.add_metric([], v(lw, "lwm2m_registered_devices"))
        yield registered
        yield _counter("devicehub_notifications", "LwM2M notifications received", v(lw, "lwm2m_notifications"))
        yield _counter(
            "devicehub_notifications_stale",
            "LwM2M notifications acknowledged but dropped as older than the last (RFC 7641 §3.4)",
            v(lw, "lwm2m_stale_notifications"),
        )

        # issue 31 #4: notifications of a token this node does not hold (another node's observation, or one from
        # before a restart), by what became of them
        unknown = CounterMetricFamily(
            "devicehub_unknown_token_notifications",
            "Notifications whose token this node did not hold, by outcome",
            labels=["outcome"],
        )
        for outcome, name in (
            ("looked_up", "lwm2m_token_lookups"),
            ("shed", "lwm2m_token_lookups_shed"),
            ("failed", "lwm2m_token_lookups_failed"),
            ("missed_cached", "lwm2m_tokens_missed_cached"),
            ("not_stored", "lwm2m_tokens_not_stored"),
            ("ended", "lwm2m_tokens_ended"),
            ("not_observed", "lwm2m_tokens_not_observed"),
            ("identity_refused", "lwm2m_tokens_identity_refused"),
        ):
            unknown.add_metric([outcome], v(lw, name))
        yield unknown

        datagrams = CounterMetricFamily(
            "devicehub_coap_datagrams", "CoAP datagrams, by direction", labels=["direction"]
        )
        datagrams.add_metric(["in"], v(lw, "coap_received"))
        datagrams.add_metric(["out"], v(lw, "coap_sent"))
        yield datagrams
        errors = CounterMetricFamily("devicehub_coap_errors", "CoAP exchange errors, by kind", labels=["kind"])
        for kind in ("malformed", "timeouts", "resets"):
            errors.add_metric([kind], v(lw, f"coap_{kind}"))
        yield errors
        yield _counter(
            "devicehub_coap_duplicates", "Duplicate CoAP messages answered from cache", v(lw, "coap_duplicates")
        )
        yield _counter(
            "devicehub_coap_retransmissions", "Confirmable CoAP messages sent again", v(lw, "coap_retransmissions")
        )
        lane = CounterMetricFamily(
            "devicehub_coap_lane_datagrams",
            "Of the CoAP datagrams in, those a listener's notification lane took (values of armed observations and "
            "retransmissions of their CON ones), without Python per datagram",
            labels=["listener"],
        )
        for listener in ("coap", "coaps"):
            lane.add_metric([listener], v(lw, f"{listener}_lane_taken"))
        yield lane
        # issue 14: what the rate limits dropped, Block1 uploads refused or expired, and the per-peer tables
        limited = CounterMetricFamily(
            "devicehub_coap_rate_limited",
            "CoAP requests dropped unanswered over a rate, by listener and by the bound that dropped them: their "
            "source address and port's (address) or their host's, all its ports together (host; issue 28 #5)",
            labels=["listener", "cause"],
        )
        for listener in COAP_LISTENERS:
            if listener == "coap" or f"{listener}_received" in lw:  # the plain one always; the others when they run
                limited.add_metric([listener, "address"], v(lw, f"{listener}_rate_limited"))
                limited.add_metric([listener, "host"], v(lw, f"{listener}_host_rate_limited"))
        yield limited
        drops = CounterMetricFamily(
            "devicehub_udp_receive_drops",
            "Datagrams the kernel dropped at a UDP listener: its receive buffer was full (see net.core.rmem_max)",
            labels=["listener"],
        )
        for listener in ("coap", "coaps"):
            drops.add_metric([listener], v(lw, f"{listener}_receive_drops"))
        yield drops
        block1 = CounterMetricFamily("devicehub_coap_block1_dropped", "Block1 uploads ended unfinished", labels=["why"])
        block1.add_metric(["refused"], v(lw, "coap_block1_refused"))
        block1.add_metric(["expired"], v(lw, "coap_block1_expired"))
        yield block1
        tables = GaugeMetricFamily("devicehub_peer_table_size", "Sizes of the per-peer tables", labels=["table"])
        for table in (
            "dedup_entries",
            "dedup_bytes",
            "block1_transfers",
            "block1_bytes",
            "rate_buckets",
            "host_rate_buckets",
            "tasks",
            "lane_armed",  # observations armed in the notification lane, and the CON message IDs it acknowledged
            "lane_acked",
        ):
            tables.add_metric([table], v(lw, f"coap_{table}"))
        tables.add_metric(["locks"], v(lw, "lwm2m_locks"))
        yield tables

        # issue 31 #1 (Redis mode): device-bound work taken by one node for a device another node holds
        handovers = CounterMetricFamily(
            "devicehub_device_handovers",
            "Device-bound work (requests, observes, cancels) taken here for a device held by another node, by "
            "outcome: sent to its holder, orphaned (the holder is gone: it waits for the device's next contact), "
            "work other nodes handed to this node, taken, and work handed to a node that died before doing it, "
            "salvaged (done here, the node that took the device next), and an observe or cancel that waited for a "
            "device no live node held, waited (done here, the node the device reached next), or expired (answered "
            "REQUEST_EXPIRED here: the device did not come back in time)",
            labels=["outcome"],
        )
        for outcome in ("sent", "orphaned", "taken", "salvaged", "waited", "expired"):
            handovers.add_metric([outcome], v(lw, f"handover_{outcome}"))
        yield handovers

        enqueued = CounterMetricFamily(
            "devicehub_events_enqueued", "Events put on channel queues, by kind", labels=["kind"]
        )
        # the hub keeps its counters private; reading them here keeps the hub free of exporter code
        by_kind = services.hub.counters.queued_by_kind
        for code, name in EVENT_KINDS.items():
            enqueued.add_metric([name], by_kind.get(code, 0))
        yield enqueued
        yield _counter("devicehub_events_delivered", "Events delivered to channels", v(hub, "events_delivered_total"))
        dropped = CounterMetricFamily("devicehub_events_dropped", "Events dropped, by cause", labels=["cause"])
        for cause in ("overflow", "expired", "failed"):
            dropped.add_metric([cause], v(hub, f"dropped_{cause}_total"))
        yield dropped
        yield _counter("devicehub_channels_removed", "Channels removed", v(hub, "channels_removed_total"))
        yield _counter(
            "devicehub_channels_removed_gone",
            "Callback channels removed because the receiver answered 410 Gone (delivery.remove_on_gone)",
            v(hub, "channels_removed_gone_total"),
        )

        channels = GaugeMetricFamily(
            "devicehub_channels", "Notification channels on this node, by kind", labels=["kind"]
        )
        for kind in ("callback", "websocket", "pull"):
            channels.add_metric([kind], v(hub, f"channels_{kind}"))
        yield channels
        for name, doc, key in (
            ("devicehub_websocket_connections", "Open notification WebSockets", "websockets_connected"),
            ("devicehub_queue_events", "Events queued on all channels", "queued_events"),
            ("devicehub_queue_bytes", "Bytes queued on all channels", "queued_bytes"),
            ("devicehub_callbacks_failing", "Callback channels whose last delivery failed", "callbacks_failing"),
        ):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], v(hub, key))
            yield gauge
        depth = GaugeMetricFamily(
            "devicehub_channel_queue_events", f"Events queued, for the {TOP_QUEUES} largest queues", labels=["key_id"]
        )
        size = GaugeMetricFamily(
            "devicehub_channel_queue_bytes", f"Bytes queued, for the {TOP_QUEUES} largest queues", labels=["key_id"]
        )
        for channel in services.hub.largest_queues(TOP_QUEUES):
            depth.add_metric([channel.key_id], channel.size)
            size.add_metric([channel.key_id], channel.queue.bytes_used)
        yield depth
        yield size
        pending = GaugeMetricFamily("devicehub_device_requests_pending", "Device requests queued, not yet answered")
        pending.add_metric([], self._metrics.pending_requests)
        yield pending


def _dtls_families(lw: dict[str, Any]) -> Iterator[Metric]:
    """The DTLS listener's figures (`DtlsStats`, issue 13), when it runs: sessions open, and its counters by event
    (handshakes, resumed, refused, busy, timeouts, hello_verify_requests, records_in/out, dropped, revoked; issue 28:
    busy_address, busy_prefix and the evictions by cause, evicted_handshake/_identity/_lru/_idle)."""
    if "dtls_sessions" not in lw:
        return
    sessions = GaugeMetricFamily("devicehub_dtls_sessions", "DTLS sessions established and open")
    sessions.add_metric([], float(lw["dtls_sessions"]))
    yield sessions
    events = CounterMetricFamily("devicehub_dtls_events", "DTLS listener events, by kind", labels=["event"])
    for key, value in sorted(lw.items()):
        if key.startswith("dtls_") and key != "dtls_sessions":
            events.add_metric([key.removeprefix("dtls_")], float(value))
    yield events
    # issue 31 #5: what resumption saves, a full handshake (key exchange, certificate) against an abbreviated one
    kinds = CounterMetricFamily("devicehub_dtls_handshakes", "DTLS handshakes completed, by kind", labels=["kind"])
    kinds.add_metric(["full"], float(lw["dtls_handshakes"] - lw["dtls_resumed"]))
    kinds.add_metric(["resumed"], float(lw["dtls_resumed"]))
    yield kinds


def _bootstrap_families(lw: dict[str, Any]) -> Iterator[Metric]:
    """The bootstrap server's figures (`BootstrapStats`), when it runs: sessions in progress and its counters by
    event (requests, completed, failed, refused, forbidden, malformed, busy, superseded), and those of its DTLS
    listener (issue 28 #6) as `_dtls_families` names the LwM2M one's."""
    if "bootstrap_sessions" not in lw:
        return
    for prefix, what in (("bootstrap", "LwM2M bootstrap server"), ("bootstrap_dtls", "bootstrap DTLS listener")):
        if f"{prefix}_sessions" not in lw:
            continue
        sessions = GaugeMetricFamily(f"devicehub_{prefix}_sessions", f"Sessions of the {what} in progress or open")
        sessions.add_metric([], float(lw[f"{prefix}_sessions"]))
        yield sessions
        events = CounterMetricFamily(f"devicehub_{prefix}_events", f"{what} events, by kind", labels=["event"])
        for key, value in sorted(lw.items()):
            kind = key.removeprefix(f"{prefix}_")
            if key.startswith(f"{prefix}_") and kind != "sessions" and not kind.startswith("dtls_"):
                events.add_metric([kind], float(value))
        yield events


def _firmware_families(lw: dict[str, Any]) -> Iterator[Metric]:
    """Firmware update (issue 33), when it runs: the CoAP file server's blocks and bytes served, downloads started
    from block 0 and resumed at a later block, unknown images; the campaign engine's devices started, succeeded and
    failed, and campaigns its halt rule stopped."""
    if "firmware_blocks" not in lw:
        return
    events = CounterMetricFamily("devicehub_firmware_events", "Firmware update events, by kind", labels=["event"])
    for key, value in sorted(lw.items()):
        if key.startswith("firmware_"):
            events.add_metric([key.removeprefix("firmware_")], float(value))
    yield events
