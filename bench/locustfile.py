"""Locust scenario for the REST edge and the event path (issue 30 #7): applications making REST calls next to
applications holding a notification channel.

- `Application`: subscribe, device request and echo read against simulated devices (requests/s, p50/p99 per call).
- `WebSocketEvents`: holds the WebSocket channel of its own API key (`DEVICEHUB_WEBSOCKET_KEY`).
- `CallbackEvents`: runs an HTTP receiver in the Locust process and holds the callback channel of its own API key
  (`DEVICEHUB_CALLBACK_KEY`).
Each event user presubscribes to the devices' observed resource and reports every event it receives into Locust's
statistics as a request of type `EVENT` (name `websocket` or `callback`) whose response time is the device → application
latency: the payload is the device's send time (`devicehub simulate --hot-path --non --stamp`), the receive time is
taken as the message arrives; both on this machine's clock. Locust's table then gives events/s and latency
percentiles per channel next to the REST calls'. One user of each kind (`fixed_count`): one channel per key (spec §2.5).

Run it with `python bench/rest_load.py --event-rate 1200` (starts devicehub, the keys and a simulator, then Locust
headless) or point Locust at a running service with `DEVICEHUB_API_KEY=… DEVICEHUB_DEVICES=id1,id2
DEVICEHUB_WEBSOCKET_KEY=… DEVICEHUB_CALLBACK_KEY=… locust -f bench/locustfile.py --host URL` (an unset key leaves its
user idle; the keys must be presubscribed to `OBSERVED` before the devices register, as rest_load.py does).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import gevent
import requests
import websocket
from gevent.pywsgi import WSGIServer
from locust import HttpUser, User, constant, task
from locust.env import Environment

_ids = itertools.count()
# what the hot path notifies: the Pelion flavour's auto-observed resource, and the one `Application` subscribes to
# (the hot path takes a device's newest observation)
OBSERVED = ["/3/0/9", "/3303/0/5700"]
SERIALIZATION = {"serialization": {"type": "v2", "max_chunk_size": 10000}}
STAMPED_AFTER = 1e9  # a send time is seconds since the epoch; a battery level or a temperature is far below


class Application(HttpUser):
    # as fast as it can by default; next to the event users a pause (DEVICEHUB_REST_WAIT seconds) keeps the REST users
    # from taking the whole Locust process, which then read the channels late (4 unpaced REST users: 160 of 1 200
    # events/s counted)
    wait_time = constant(float(os.environ.get("DEVICEHUB_REST_WAIT", "0")))

    def on_start(self) -> None:
        self.client.headers["Authorization"] = "Bearer " + os.environ["DEVICEHUB_API_KEY"]
        self.devices = [d for d in os.environ["DEVICEHUB_DEVICES"].split(",") if d]

    @task(2)
    def subscribe(self) -> None:
        device = random.choice(self.devices)
        self.client.put(f"/v2/subscriptions/{device}/3303/0/5700", name="PUT /v2/subscriptions/{id}/{path}")

    @task(2)
    def device_request(self) -> None:
        device = random.choice(self.devices)
        self.client.post(
            f"/v2/device-requests/{device}?async-id=load-{os.getpid()}-{next(_ids)}",
            json={"method": "GET", "uri": "/3303/0/5700"},
            name="POST /v2/device-requests/{id}",
        )

    @task(5)
    def echo(self) -> None:
        device = random.choice(self.devices)
        self.client.get(f"/v3/devices/{device}/echo", name="GET /v3/devices/{id}/echo")


def report_events(environment: Environment, channel: str, body: bytes) -> None:
    """Fire one `EVENT` per notification of a NotificationMessage: its device → application latency in ms."""
    now = time.time()
    fire = environment.events.request.fire
    for note in json.loads(body or b"{}").get("notifications", []):
        try:
            sent = float(base64.b64decode(note.get("payload", "")))
        except ValueError:
            continue
        if sent < STAMPED_AFTER:  # a plain value (a notification sent on the devices' normal path), no send time
            continue
        fire(
            request_type="EVENT",
            name=channel,
            response_time=(now - sent) * 1000,
            response_length=len(note.get("payload", "")),
            exception=None,
            context={},
        )


class _EventUser(User):
    """Holds one channel of its own API key, presubscribed to the observed resource, for the whole run."""

    abstract = True
    fixed_count = 1
    wait_time = constant(0)
    key_variable = ""

    def on_start(self) -> None:
        self.key = os.environ.get(self.key_variable, "")
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.key}"
        if self.key:
            answer = self.http.put(f"{self.host}/v2/subscriptions", json=[{"resource-path": OBSERVED}])
            answer.raise_for_status()

    def on_stop(self) -> None:
        self.http.close()


class WebSocketEvents(_EventUser):
    key_variable = "DEVICEHUB_WEBSOCKET_KEY"

    def on_start(self) -> None:
        super().on_start()
        self.ws: websocket.WebSocket | None = None
        if not self.key:
            return
        self.http.put(f"{self.host}/v2/notification/websocket", json=SERIALIZATION).raise_for_status()
        url = "ws" + self.host.removeprefix("http") + "/v2/notification/websocket-connect"
        self.ws = websocket.create_connection(url, header=[f"Authorization: Bearer {self.key}"])

    @task
    def receive(self) -> None:
        if self.ws is None:
            gevent.sleep(1)
            return
        report_events(self.environment, "websocket", self.ws.recv())

    def on_stop(self) -> None:
        if self.ws is not None:
            self.ws.close()
        super().on_stop()


class CallbackEvents(_EventUser):
    key_variable = "DEVICEHUB_CALLBACK_KEY"

    def on_start(self) -> None:
        super().on_start()
        self.server: WSGIServer | None = None
        if not self.key:
            return
        self.server = WSGIServer(("127.0.0.1", 0), self._receive, log=None)
        self.server.start()
        body = {"url": f"http://127.0.0.1:{self.server.server_port}/callback", **SERIALIZATION}
        self.http.put(f"{self.host}/v2/notification/callback", json=body).raise_for_status()

    def _receive(self, environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        """The callback receiver: every PUT (the verification included) answered 200, its events reported."""
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        report_events(self.environment, "callback", body)
        start_response("200 OK", [("Content-Length", "0")])
        return iter([b""])

    @task
    def hold(self) -> None:
        gevent.sleep(1)  # the receiver runs in its own greenlets

    def on_stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        super().on_stop()
