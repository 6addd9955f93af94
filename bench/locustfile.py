"""Locust scenario for the REST edge: subscribe, device request and echo read against simulated devices.

Measures requests/s and p50/p99 latency of the three calls an application makes most. Run it with
`python bench/rest_load.py` (starts devicehub and a simulator, then Locust headless) or point Locust at a
running service: `DEVICEHUB_API_KEY=… DEVICEHUB_DEVICES=id1,id2 locust -f bench/locustfile.py --host URL`.
"""

from __future__ import annotations

import itertools
import os
import random

from locust import HttpUser, between, task

_ids = itertools.count()


class Application(HttpUser):
    wait_time = between(0, 0)

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
