"""Registration Update payloads (issue 12 #4): an object list replaces the registered one (LwM2M 1.1 §6.2.2);
the Pelion client's per-resource delta (`;d` deletes) is merged (lwm2m-device-side.md §8)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from devicehub.domain.model import ResourceLink
from devicehub.lwm2m import codes
from devicehub.node import Node
from devicehub.sim.device import OMA, OmaBehaviour
from support.node import device, run, running_node


async def _endpoint_paths(node: Node, device_id: str) -> set[str]:
    headers = {"Authorization": f"Bearer {node.dev_api_key}"}
    async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
        async with http.get(f"/v2/endpoints/{device_id}", headers=headers) as r:
            assert r.status == 200
            return {entry["uri"] for entry in await r.json()}


def test_an_update_with_an_object_list_replaces_the_registered_objects(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "full-1", flavor=OMA) as sim:
            device_id = sim.device_id or ""
            before = await _endpoint_paths(node, device_id)
            assert {"/3/0", "/3303/0", "/3311/0"} <= before
            # Wakaama/Anjay send the whole object list when it changed: /3311/0 is gone, /3303/1 is new
            kept = [ResourceLink(path=p) for p in sorted(before - {"/3311/0"})]
            assert await sim.update([*kept, ResourceLink(path="/3303/1")]) == codes.CHANGED
            after = await _endpoint_paths(node, device_id)
            assert after == (before - {"/3311/0"}) | {"/3303/1"}
            stored = await node.store.get_device(device_id)
            assert stored is not None and {r.path for r in stored.resources} == after

    run(scenario())


def test_a_pelion_delta_adds_and_deletes_single_resources(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "delta-1") as sim:
            device_id = sim.device_id or ""
            before = await _endpoint_paths(node, device_id)
            assert "/3303/0/5700" in before
            delta = [ResourceLink(path="/3303/1/5700"), ResourceLink(path="/3303/0/5700", deleted=True)]
            assert await sim.update(delta) == codes.CHANGED
            assert await _endpoint_paths(node, device_id) == (before - {"/3303/0/5700"}) | {"/3303/1/5700"}

    run(scenario())


def test_a_client_sending_its_whole_object_list_in_every_update_drops_a_removed_object(tmp_path: Path) -> None:
    """The simulator's `full_list_updates` switch (Wakaama/Anjay habit): the Update is the client's own list."""

    async def scenario() -> None:
        oma = OmaBehaviour(full_list_updates=True)
        async with running_node(tmp_path) as node, device(node, "full-2", flavor=OMA, oma=oma) as sim:
            device_id = sim.device_id or ""
            assert "/3311/0" in await _endpoint_paths(node, device_id)
            del sim.model.objects[3311]  # the client no longer has the light control object
            assert await sim.update() == codes.CHANGED
            assert "/3311/0" not in await _endpoint_paths(node, device_id)
            assert {"/3/0", "/3303/0"} <= await _endpoint_paths(node, device_id)

    run(scenario())
