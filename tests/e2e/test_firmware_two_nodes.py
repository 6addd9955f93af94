"""A campaign in Redis mode updates the devices of every node (issue 33, with issue 31 #1's hand-over): two
`devicehub serve` processes on one real Redis, simulated devices with object 5 registered at each; one node holds
the `firmware:campaigns` lease and runs the campaign, and each device registered at the other node is handed to that
node (its holder), which updates it over its own session and file server. Every device is deployed, and each node
updated its own devices."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.apps import simulator, stop
from support.firmware_api import IMAGE, MANIFEST, firmware_counter, upload
from support.service import ServiceProcess
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

PER_NODE = 10


@pytest.fixture
def nodes(redis_url: str, tmp_path: Path) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    """Two nodes on one Redis, one application key."""
    extra = ("--redis-url", redis_url, "--firmware-check-interval", "0.2")
    node_a = ServiceProcess(data_dir=tmp_path / "a", extra_args=(*extra, "--node-id", "node-a")).start()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "dev-api-key").write_text(node_a.api_key + "\n")
    node_b = ServiceProcess(data_dir=tmp_path / "b", extra_args=(*extra, "--node-id", "node-b"))
    try:
        node_b.start()
        yield node_a, node_b
    finally:
        node_b.stop()
        node_a.stop()


def _fleet(node: ServiceProcess, name: str) -> subprocess.Popen[str]:
    """PER_NODE devices with object 5 registered at `node` (an hour's lifetime: no Update moves them meanwhile)."""
    return simulator(
        node.coap_uri, "--count", str(PER_NODE), "--prefix", f"fw-{name}-", "--endpoint-type", "fw-fleet",
        "--flavor", "oma", "--rate", "0", "--firmware", "--lifetime", "3600",
    )  # fmt: skip


def test_a_campaign_updates_the_devices_registered_at_either_node(nodes: tuple[ServiceProcess, ServiceProcess]) -> None:
    node_a, node_b = nodes
    fleets = [_fleet(node, name) for name, node in (("a", node_a), ("b", node_b))]
    try:
        node_a.registered_devices(2 * PER_NODE, within=30)
        upload(node_a, "/v3/firmware-images", IMAGE.read_bytes())
        manifest = upload(node_a, "/v3/firmware-manifests", MANIFEST.read_bytes())
        body = {"device_filter": "endpoint_type=fw-fleet", "root_manifest_id": manifest["id"]}
        status, campaign = node_a.api("POST", "/v3/update-campaigns", body)
        assert status == 201, campaign
        path = f"/v3/update-campaigns/{campaign['id']}"
        assert node_b.api("POST", f"{path}/start")[0] == 202

        def stopped() -> Any:
            found = node_a.api("GET", path)[1]
            return found if found["phase"] == "stopped" else None

        # before the hand-over the devices of the node without the lease stayed pending: the campaign never stopped
        wait_until(stopped, within=90, what="the campaign updates both nodes' devices", every=0.5)
        _, devices = node_b.api("GET", f"{path}/campaign-device-metadata?limit=100")
        states = {d["name"]: d["deployment_state"] for d in devices["data"]}
        assert len(states) == 2 * PER_NODE and set(states.values()) == {"deployed"}, states
        # each node updated the devices registered at it, over its own sessions
        assert [firmware_counter(node, "devices_succeeded") for node in nodes] == [PER_NODE, PER_NODE]
        assert [firmware_counter(node, "first_blocks") for node in nodes] == [PER_NODE, PER_NODE]
    finally:
        for fleet in fleets:
            stop(fleet)
