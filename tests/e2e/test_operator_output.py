"""What `devicehub serve` tells its operator: the first-run hint without --dev, and JSON logs with request ids."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from support.node import run
from support.service import ServiceProcess
from support.waiting import eventually

pytestmark = pytest.mark.e2e


def test_serve_without_dev_and_without_keys_prints_the_three_commands_that_work(tmp_path: Path) -> None:
    data = tmp_path / "data"
    service = ServiceProcess(data_dir=data, dev=False).start()
    service.stop()
    text = "".join(service.output)
    assert "no account with an API key exists yet" in text
    commands = [line.strip() for line in text.splitlines() if line.strip().startswith("devicehub ")]
    assert [c.split()[1:3] for c in commands] == [["accounts", "create"], ["accounts", "enroll"], ["keys", "create"]]
    for command in commands:
        args = [a if a != "<endpoint-name>..." else "sensor-1" for a in shlex.split(command)[1:]]
        done = subprocess.run([sys.executable, "-m", "devicehub", *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("ak_")  # the key, shown once
    again = ServiceProcess(data_dir=data, dev=False).start()
    again.stop()
    assert "no account with an API key" not in "".join(again.output)


def test_json_log_format_puts_the_request_id_on_api_lines(tmp_path: Path) -> None:
    service = ServiceProcess(data_dir=tmp_path / "data", extra_args=("--log-format", "json", "--log-level", "debug"))
    service.start()
    try:
        request = urllib.request.Request(
            f"{service.base_url}/v3/devices",
            headers={"Authorization": f"Bearer {service.api_key}", "X-Request-Id": "req-17-abc"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200 and response.headers["X-Request-Id"] == "req-17-abc"

        async def logged() -> None:
            await eventually(lambda: any("req-17-abc" in line for line in service.output))

        run(logged())
    finally:
        service.stop()
    entries = [json.loads(line) for line in service.output if line.startswith("{")]
    assert entries and all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    access = [e for e in entries if e.get("request_id") == "req-17-abc"]
    assert access and access[0]["logger"] == "devicehub.api.access"
    assert "GET /v3/devices 200" in access[0]["message"]
    assert any(e["message"].startswith("devicehub serving HTTP") for e in entries)
