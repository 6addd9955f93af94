"""Settings: one object per command, where each field is a flag and a `DEVICEHUB_<FIELD>` env var."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "DEVICEHUB_"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
PORT: dict[str, Any] = {"range": (0, 65535)}
# the LwM2M client options `simulate` and `edge` share (issue 13 #7), read by security.client_credentials
LWM2M_SERVER_SCHEMES = ("coap", "coaps", "coap+tcp", "coaps+tcp")
PSK_IDENTITY: dict[str, Any] = {"help": "coaps:// or coaps+tcp://: PSK identity (default: the endpoint name)"}
PSK_KEY: dict[str, Any] = {"help": "coaps:// or coaps+tcp://: pre-shared key in hex"}
CLIENT_CERT: dict[str, Any] = {"help": "coaps:// or coaps+tcp://: PEM client certificate (its CN is the endpoint name)"}
CLIENT_KEY: dict[str, Any] = {"help": "coaps:// or coaps+tcp://: PEM private key of --cert"}


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """`devicehub serve`: the service (REST + WebSocket API, LwM2M server, channel delivery)."""

    host: str = field(default="127.0.0.1", metadata={"help": "address the HTTP API and CoAP server bind to"})
    http_port: int = field(default=8000, metadata={**PORT, "help": "TCP port of the REST/WebSocket API"})
    coap_port: int = field(default=5683, metadata={**PORT, "help": "UDP port of the LwM2M (CoAP) server"})
    bootstrap_port: int = field(
        default=0,
        metadata={
            **PORT,
            "help": "UDP port of the LwM2M bootstrap server over plain CoAP, e.g. 5685 (0: none); it sends keys in "
            "clear, so it answers only with --allow-nosec or --dev (otherwise 4.03)",
        },
    )
    bootstrap_coaps_port: int = field(
        default=0,
        metadata={
            **PORT,
            "help": "UDP port of the LwM2M bootstrap server over DTLS (coaps://), e.g. 5686 (0: none), with the DTLS "
            "listener's credentials, certificate and handshake bounds",
        },
    )
    data_dir: Path = field(default=Path("devicehub-data"), metadata={"help": "directory of the embedded store"})
    redis_url: str = field(
        default="",
        metadata={"url": ("redis", "rediss", "unix"), "help": "redis://… to keep all state in Redis (several nodes)"},
    )
    redis_timeout: float = field(
        default=5.0, metadata={"help": "seconds a Redis command may take; beyond, the request answers 503"}
    )
    dev: bool = field(
        default=False,
        metadata={"help": "development mode: create/reuse a dev account and key, accept any device into it"},
    )
    flush_interval_ms: int = field(
        default=100,
        metadata={"range": (1, 60_000), "help": "longest time a queued event or a reported value stays only in memory"},
    )
    node_id: str = field(default="", metadata={"help": "name of this node in Redis mode (default: host:pid)"})
    registration_grace: float = field(
        default=93.0, metadata={"help": "seconds a registration outlives its lifetime before it expires"}
    )
    log_level: str = field(default="info", metadata={"choices": LOG_LEVELS, "help": "debug, info, warning or error"})
    log_format: str = field(
        default="text",
        metadata={"choices": LOG_FORMATS, "help": "text for people, json (one object a line) for machines"},
    )
    registration_backlog: int = field(
        default=2000,
        metadata={
            "help": "registrations admitted but not yet stored beyond which a Register is answered CoAP 5.03 "
            "with a Max-Age that books its return into the first second the node can take (2-120 s; load shedding in a "
            "registration storm)"
        },
    )
    device_events_retention: float = field(
        default=7 * 86_400.0,
        metadata={
            "range": (60.0, 366 * 86_400.0),
            "help": "seconds a device lifecycle event (GET /v3/device-events) is kept; each device keeps at most its "
            "newest 200 whatever their age",
        },
    )
    max_body_bytes: int = field(default=1_048_576, metadata={"help": "largest accepted REST request body"})
    firmware_max_bytes: int = field(
        default=64 * 1_048_576,
        metadata={"help": "largest firmware image an upload may store (POST /v3/firmware-images answers 413 above)"},
    )
    firmware_base_uri: str = field(
        default="",
        metadata={
            "help": "how devices reach this node's CoAP file server in the Package URI they are given, e.g. "
            "coap://dm.example.com:5683 (default: this node's listener of the transport the device registered over)"
        },
    )
    firmware_concurrency: int = field(
        default=200,
        metadata={"range": (1, 100_000), "help": "devices one node updates at once across its running campaigns"},
    )
    firmware_check_interval: float = field(
        default=2.0,
        metadata={"help": "seconds between reads of an updating device's State /5/0/3 and Update Result /5/0/5"},
    )
    tls_cert: str = field(default="", metadata={"help": "PEM certificate (chain) to serve the API over HTTPS"})
    tls_key: str = field(default="", metadata={"help": "PEM private key of --tls-cert (if not in the same file)"})
    tls_client_ca: str = field(
        default="", metadata={"help": "PEM CA bundle: HTTPS clients must present a certificate it signed"}
    )
    max_batch_bytes: int = field(
        default=1_048_576,
        metadata={"help": "largest NotificationMessage sent at once (WebSocket frame, callback or pull body)"},
    )
    channel_max_bytes: int = field(
        default=50 * 1024 * 1024,
        metadata={
            "range": (4096, 1 << 40),
            "help": "byte cap of one key's channel queue; beyond it the oldest events become dead letters (spec §8: "
            "50 MB)",
        },
    )
    rate_limit: float = field(
        default=200.0,
        metadata={"help": "REST requests a second per API key (unauthenticated: per client address); 0: no limit"},
    )
    rate_limit_burst: float = field(default=1000.0, metadata={"help": "REST requests one key may make at once"})
    coap_rate_limit: float = field(
        default=100.0,
        metadata={"help": "CoAP requests a second per device address (twice that at once); 0: no limit"},
    )
    # issue 28 #5: a host's source ports share one allowance, or each port it opens would add 100/s. Generous, since a
    # whole fleet can sit behind one NAT address or in one /64 (a Thread or 6LoWPAN mesh): LwM2M devices send a
    # request per Update (minutes apart; notifications are responses and do not count), so 1 000/s is a fleet of
    # 100 000 updating every 100 s, and the burst lets 2 000 register at once after the NAT restarts, as many as
    # --registration-backlog admits; yet one attacker's host gets 1 000/s however many ports it opens.
    coap_host_rate_limit: float = field(
        default=1000.0,
        metadata={
            "help": "CoAP requests a second per host, all its source ports together (an IPv6 host: its /64); "
            "raise it for a larger fleet behind one NAT address; 0: no limit"
        },
    )
    coap_host_rate_burst: float = field(
        default=2000.0, metadata={"help": "CoAP requests one host may make at once (see --coap-host-rate-limit)"}
    )
    http_header_timeout: float = field(
        default=20.0,
        metadata={
            "help": "seconds a connection may take to send a request's head (from its opening or the previous "
            "answer); also how long an idle keep-alive connection stays open"
        },
    )
    pull_timeout: float = field(
        default=30.0, metadata={"help": "seconds a long poll (GET /v2/notification/pull) waits for events"}
    )
    callback_ca_file: str = field(default="", metadata={"help": "CA bundle for HTTPS callbacks (default: system)"})
    callback_allow: str = field(
        default="",
        metadata={
            "help": "comma-separated addresses or CIDR networks callbacks may reach besides public addresses "
            "(loopback, private, link-local and metadata addresses are refused otherwise; --dev allows loopback)"
        },
    )
    callback_secret_overlap: float = field(
        default=86400.0,
        metadata={
            "help": "seconds a callback signing secret keeps signing after POST /v2/notification/callback/secret "
            "replaced it, so receivers switch over without refusing requests"
        },
    )
    callback_client_cert: str = field(
        default="", metadata={"help": "PEM certificate (with key) the service presents to callback servers"}
    )
    # issue 13: device security
    coaps_port: int = field(default=5684, metadata={"help": "UDP port of the LwM2M server over DTLS (0: none)"})
    coap_tcp_port: int = field(
        default=0, metadata={"help": "TCP port of the LwM2M server over CoAP/TCP, RFC 8323 (0: none)"}
    )
    coaps_tcp_port: int = field(
        default=0,
        metadata={
            "help": "TCP port of the LwM2M server over CoAP/TLS (coaps+tcp://, RFC 8323), with the DTLS listener's "
            "credentials, certificate and handshake bounds (0: none)"
        },
    )
    allow_nosec: bool = field(
        default=False, metadata={"help": "accept devices over plain CoAP, without DTLS (always on with --dev)"}
    )
    secret_key_file: str = field(
        default="",
        metadata={
            "help": "key sealing device secrets at rest (default <data-dir>/secret.key, made when absent; "
            "in Redis mode give every node the same file)"
        },
    )
    coaps_cert: str = field(
        default="", metadata={"help": "PEM certificate of the DTLS server (default: a self-signed P-256 one)"}
    )
    coaps_key: str = field(default="", metadata={"help": "PEM private key of --coaps-cert"})
    dtls_handshake_timeout: float = field(default=10.0, metadata={"help": "seconds a DTLS handshake may take"})
    dtls_max_handshakes: int = field(default=256, metadata={"help": "DTLS handshakes in progress at once"})
    # issue 28 #3, #4: no source or identity can take the DTLS listener's handshakes or sessions from the others
    dtls_handshakes_per_address: int = field(
        default=16,
        metadata={
            "range": (1, 1_000_000),
            "help": "DTLS handshakes in progress at once from one source address (raise it for many devices behind "
            "one NAT that reconnect together)",
        },
    )
    dtls_handshakes_per_prefix: int = field(
        default=64,
        metadata={
            "range": (1, 1_000_000),
            "help": "DTLS handshakes in progress at once from one /24 (IPv4) or /64 (IPv6) network",
        },
    )
    dtls_max_sessions: int = field(
        default=100_000,
        metadata={
            "range": (1, 10_000_000),
            "help": "DTLS sessions open at once; beyond, a new session ends the least recently active one",
        },
    )
    dtls_sessions_per_identity: int = field(
        default=2,
        metadata={
            "range": (1, 1_000),
            "help": "DTLS sessions open at once per PSK identity or certificate; beyond, a new one ends the oldest",
        },
    )
    dtls_ticket_rotation: float = field(
        default=86_400.0,
        metadata={
            "range": (0.0, 31_536_000.0),
            "help": "seconds between rotations of the DTLS session-ticket keys the nodes share through the store (a "
            "ticket resumes for one to two of them, on any node); 0: no tickets, sessions resume only on the node "
            "that made them",
        },
    )
    dtls_idle_timeout: float = field(
        default=259_200.0,
        metadata={
            "range": (1.0, 31_536_000.0),
            "help": "seconds a DTLS session may stay silent before it ends (default 72 h: the longest registration "
            "lifetime, so a device that updates in time keeps its session)",
        },
    )


@dataclass(frozen=True, slots=True)
class SimulateSettings:
    """`devicehub simulate`: N simulated LwM2M devices on real UDP sockets."""

    server: str = field(
        default="coap://127.0.0.1:5683", metadata={"url": LWM2M_SERVER_SCHEMES, "help": "LwM2M server URI"}
    )
    count: int = field(default=1, metadata={"range": (1, 1_000_000), "help": "number of devices"})
    prefix: str = field(default="sim-", metadata={"help": "endpoint name prefix (names are <prefix><n>)"})
    endpoint_type: str = field(default="devicehub-sim", metadata={"help": "endpoint type (et=)"})
    lifetime: int = field(default=300, metadata={"help": "registration lifetime in seconds"})
    queue_mode: bool = field(default=False, metadata={"help": "register with binding UQ (queue mode)"})
    rate: float = field(default=0.2, metadata={"help": "temperature changes per second per device"})
    flavor: str = field(
        default="pelion", metadata={"choices": ("oma", "pelion"), "help": "oma (plain LwM2M) or pelion (Pelion client)"}
    )
    duration: float = field(default=0.0, metadata={"help": "stop after this many seconds (0: run until Ctrl-C)"})
    register_rate: float = field(
        default=500.0,
        metadata={"help": "new registrations per second per worker process (ramp-up; --workers 8 offers 8x this)"},
    )
    bootstrap: str = field(
        default="",
        metadata={
            "url": ("coap", "coaps"),
            "help": "coap://host:5685 or coaps://host:5686 (with --psk-key or --cert/--key): bootstrap there first, "
            "then register where it says",
        },
    )
    observe_restart: bool = field(default=False, metadata={"help": "restart Observe numbers at 0 on a re-observe"})
    block_size: int = field(default=1024, metadata={"help": "the devices' CoAP block size (16-1024)"})
    max_payload: int = field(default=0, metadata={"help": "answer larger request payloads 4.13 (0: no limit)"})
    full_list_updates: bool = field(
        default=False, metadata={"help": "send the whole object list in every registration update (Wakaama, Anjay)"}
    )
    psk_identity: str = field(default="", metadata=PSK_IDENTITY)
    psk_key: str = field(default="", metadata=PSK_KEY)
    cert: str = field(default="", metadata=CLIENT_CERT)
    key: str = field(default="", metadata=CLIENT_KEY)
    workers: int = field(default=1, metadata={"help": "processes to run the devices in (device n runs in n mod N)"})
    bind: str = field(
        default="127.0.0.1",
        metadata={
            "help": "local address, or a network such as 127.0.0.0/24 whose host addresses device n takes in "
            "turn (address n mod hosts): more devices than one address has ports"
        },
    )
    non: bool = field(default=False, metadata={"help": "send notifications non-confirmable (NON) whatever the flavor"})
    scenario: str = field(
        default="", metadata={"help": "JSON or TOML scenario file: device groups, rates, churn (overrides the above)"}
    )
    hot_path: bool = field(
        default=False,
        metadata={
            "help": "every value change at --rate is a notification of the device's observed resource, sent from a "
            "datagram encoded once, in batches (NON only; CON, attributes, DTLS and TCP take the normal path)"
        },
    )
    app: str = field(
        default="",
        metadata={
            "url": ("http", "https"),
            "help": "http://host:port of the service's REST API: measure device → application latency on a "
            "WebSocket channel there (with --api-key; the hot path's notifications then carry their send time)",
        },
    )
    api_key: str = field(default="", metadata={"help": "API key of --app (its account's channel is used)"})
    stamp: bool = field(
        default=False,
        metadata={
            "help": "the hot path's notifications carry their send time (as with --app) for an application that "
            "measures latency itself (bench/locustfile.py)"
        },
    )
    firmware: bool = field(
        default=False, metadata={"help": "the devices have Firmware Update object 5 (pull and push, issue 33)"}
    )
    firmware_corrupt_percent: float = field(
        default=0.0,
        metadata={"range": (0, 100), "help": "share of devices whose downloaded package fails its integrity check"},
    )
    firmware_refuse_percent: float = field(
        default=0.0, metadata={"range": (0, 100), "help": "share of devices that fail Update (Update Result 8)"}
    )
    firmware_reboot_at: float = field(
        default=0.0,
        metadata={
            "range": (0, 1),
            "help": "every device reboots once when this share of its package arrived (0: never)",
        },
    )


@dataclass(frozen=True, slots=True)
class EdgeSettings:
    """`devicehub edge`: Edge Core, an LwM2M client of the service with a local status API."""

    server: str = field(
        default="coap://127.0.0.1:5683",
        metadata={
            "url": LWM2M_SERVER_SCHEMES,
            "help": "LwM2M server URI of the service: coap://, coaps:// or coaps+tcp:// (with --psk-key or "
            "--cert/--key), or coap+tcp://",
        },
    )
    endpoint_name: str = field(default="edge-core", metadata={"help": "Edge Core's endpoint name"})
    endpoint_type: str = field(default="MBED_GW", metadata={"help": "Edge Core's endpoint type"})
    lifetime: int = field(default=86400, metadata={"help": "registration lifetime in seconds"})
    http_port: int = field(
        default=8080,
        metadata={
            **PORT,
            "short": "-o",
            "help": "port of GET /status (8080 as the reference release; 9101 and 8081 are the conventions "
            "of the second and the packaged distributions)",
        },
    )
    bind: str = field(default="127.0.0.1", metadata={"short": "-b", "help": "address of the status API"})
    edge_pt_domain_socket: str = field(
        default="/tmp/edge.sock", metadata={"short": "-p", "help": "Unix socket of the protocol translator API"}
    )
    keepalive_time: float = field(
        default=600.0, metadata={"help": "seconds of idle link before a keepalive probe (spec §2.6)"}
    )
    keepalive_interval: float = field(
        default=75.0, metadata={"help": "seconds between keepalive probes while no answer comes (spec §2.6)"}
    )
    psk_identity: str = field(default="", metadata=PSK_IDENTITY)
    psk_key: str = field(default="", metadata=PSK_KEY)
    cert: str = field(default="", metadata=CLIENT_CERT)
    key: str = field(default="", metadata=CLIENT_KEY)


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """`devicehub keys` / `devicehub accounts`: administration against the store."""

    data_dir: Path = field(default=Path("devicehub-data"), metadata={"help": "directory of the embedded store"})
    redis_url: str = field(
        default="", metadata={"url": ("redis", "rediss", "unix"), "help": "redis://… when the service runs on Redis"}
    )
    secret_key_file: str = field(
        default="", metadata={"help": "key sealing device secrets (default <data-dir>/secret.key, as serve)"}
    )


@dataclass(frozen=True, slots=True)
class ChannelsSettings:
    """`devicehub channels`: a running service's view of an API key's notification channel (issue 34 #5)."""

    url: str = field(
        default="http://127.0.0.1:8000", metadata={"url": ("http", "https"), "help": "the service's HTTP API"}
    )
    api_key: str = field(default="", metadata={"help": "the API key whose channel to show"})
