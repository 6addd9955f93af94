"""Runs `devicehub serve` as a real process on free ports and stops it by pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.ports import free_tcp_port, free_udp_port
from support.waiting import wait_until


@dataclass
class ServiceProcess:
    data_dir: Path
    http_port: int = field(default_factory=free_tcp_port)
    coap_port: int = field(default_factory=free_udp_port)
    extra_args: tuple[str, ...] = ()
    dev: bool = True
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[str] | None = None
    api_key: str = ""
    output: list[str] = field(default_factory=list)
    _reader: threading.Thread = field(init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def coap_uri(self) -> str:
        return f"coap://127.0.0.1:{self.coap_port}"

    def simulate_command(self, count: int, *options: str) -> list[str]:
        """`devicehub simulate` of `count` devices against this node's CoAP listener, as a process of its own."""
        return [
            sys.executable,
            "-m",
            "devicehub",
            "simulate",
            "--server",
            self.coap_uri,
            "--count",
            str(count),
            *options,
        ]

    def start(self, timeout: float = 30.0) -> ServiceProcess:
        args = [
            sys.executable,
            "-m",
            "devicehub",
            "serve",
            *(["--dev"] if self.dev else []),
            "--http-port",
            str(self.http_port),
            "--coap-port",
            str(self.coap_port),
            "--coaps-port",  # no DTLS listener unless extra_args give one (issue 13)
            "0",
            "--data-dir",
            str(self.data_dir),
            *self.extra_args,
        ]
        env = {**os.environ, **self.env}
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        ready = threading.Event()
        # drain the output all the time: a full pipe would block the service
        self._reader = threading.Thread(target=self._read, args=(self.process, ready), daemon=True)
        self._reader.start()
        if not ready.wait(timeout) or (self.dev and not self.api_key):
            self.stop()
            raise RuntimeError("devicehub serve did not start:\n" + "".join(self.output))
        return self

    def _read(self, process: subprocess.Popen[str], ready: threading.Event) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.output.append(line)
            if line.startswith("DEVICEHUB_API_KEY="):
                self.api_key = line.split("=", 1)[1].strip()
            if line.startswith("devicehub: HTTP"):
                ready.set()
        ready.set()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None
        return code

    def api(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        """One REST call with the dev key: its status and its JSON body (None when it has none)."""
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        return status, json.loads(raw) if raw else None

    def device_named(self, endpoint_name: str) -> dict[str, Any] | None:
        """The device `GET /v3/devices` lists under `endpoint_name`, None while it lists none."""
        status, body = self.api("GET", "/v3/devices?limit=1000")
        assert status == 200, body
        return next((d for d in body["data"] if d["endpoint_name"] == endpoint_name), None)

    def delivery_mechanism(self) -> str | None:
        """The dev key's notification channel type (`GET /v2/notification/channel`), None while it has none."""
        request = urllib.request.Request(
            f"{self.base_url}/v2/notification/channel", headers={"Authorization": f"Bearer {self.api_key}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return str(json.load(response)["delivery_mechanism"])
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def registered_devices(self, want: int, within: float) -> list[str]:
        """Ids of the registered devices once there are `want` of them (simulators run in other processes)."""

        def enough() -> list[str]:
            request = urllib.request.Request(
                f"{self.base_url}/v3/devices?limit=1000&filter=state%3Dregistered",
                headers={"Authorization": f"Bearer {self.api_key}"},
            )
            with urllib.request.urlopen(request, timeout=5) as response:
                ids = [str(d["id"]) for d in json.load(response)["data"]]
            return ids if len(ids) >= want else []

        return wait_until(enough, within=within, what=f"{want} devices registered")
