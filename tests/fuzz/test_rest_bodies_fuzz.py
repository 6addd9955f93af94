"""Every JSON body the REST API accepts, generated (issue 14 #12): arbitrary JSON, objects with the route's own
field names and odd values, and raw bytes, sent over real HTTP to a live node. No answer is a 5xx and the node logs
no error. The routes come from the application's router, so a new body-taking route is fuzzed without a change
here (a route missing from FIELDS is fuzzed with generic JSON)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from conftest import FUZZ
from devicehub.api.app import add_routes
from devicehub.clock import SystemClock
from devicehub.sim.device import OMA, SimDevice
from support.live_node import LiveNode

FIELDS = {
    "/v2/subscriptions": ["endpoint-name", "endpoint-type", "resource-path"],
    "/v2/notification/callback": ["url", "headers"],
    "/v2/device-requests/{device_id}": ["method", "uri", "accept", "content-type", "payload-b64"],
    "/v3/devices/{device_id}": [
        "name",
        "description",
        "custom_attributes",
        "auto_update",
        "ca_id",
        "device_key",
        "endpoint_name",
        "endpoint_type",
        "host_gateway",
    ],
    "/v3/api-keys": ["name", "groups", "status", "owner"],
}
# values that reach deeper code than random text: real paths, methods, URLs that fail fast (no DNS, no waiting)
# the node serves from its own thread and uses `random` (message IDs, jitter) while examples are drawn here
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
INTERESTING = st.sampled_from(
    [
        "/3/0/1",
        "/3303/0/5700",
        "/3/0/*",
        "GET",
        "PUT",
        "POST",
        "DELETE",
        "http://127.0.0.1:9/x",
        "http://10.0.0.1/",
        "ftp://x",
        "aGVsbG8=",
        "!!",
        "text/plain",
        "application/vnd.oma.lwm2m+tlv",
        "n-*",
        "",
        "\u00b2",
        "a" * 3000,
    ]
)
SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20) | INTERESTING
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _routes() -> list[tuple[str, str]]:
    """The route table's operations that take a body, as the node serves them (create_app adds only GETs to it)."""
    app = web.Application()
    add_routes(app)
    found = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        template = info.get("formatter") or info.get("path")
        if route.method in ("POST", "PUT", "PATCH") and template:
            found.append((route.method, template))
    return sorted(set(found))


@pytest.fixture(scope="module")
def device_id(live_node: LiveNode) -> Iterator[str]:
    async def register() -> SimDevice:
        sim = SimDevice(SystemClock(), ("127.0.0.1", live_node.node.coap_port), "fuzz-target", flavor=OMA)
        await sim.start()
        await asyncio.wait_for(sim.registered.wait(), 10)
        return sim

    sim = live_node.call(register())
    yield sim.device_id or ""
    live_node.call(sim.stop())


def _body(route: str) -> st.SearchStrategy[bytes]:
    names = FIELDS.get(route, [])
    shaped = st.dictionaries(st.sampled_from(names), JSON, max_size=len(names)) if names else JSON
    as_json = (JSON | shaped | st.lists(shaped, max_size=3)).map(lambda v: json.dumps(v).encode())
    return as_json | st.binary(max_size=64)


@FUZZ
@given(data=st.data())
def test_generated_bodies_never_get_a_5xx(live_node: LiveNode, device_id: str, data: st.DataObject) -> None:
    method, route = data.draw(st.sampled_from(_routes()))
    path = (
        route.replace("{device_id}", device_id)
        .replace("{endpoint_name}", data.draw(st.sampled_from(["fuzz-ep", "%C2%B2", "a" * 70])))
        .replace("{path}", data.draw(st.sampled_from(["3/0/1", "3303/0/5700", "x", "3/0/\u0661".encode().hex()])))
    )
    query = data.draw(st.sampled_from(["", "?async-id=fuzz-1", "?async-id=", "?retry=5&expiry-seconds=x"]))
    body = data.draw(_body(route))
    content_type = data.draw(st.sampled_from(["application/json", "text/plain", "application/octet-stream"]))
    request = urllib.request.Request(
        f"http://127.0.0.1:{live_node.node.http_port}{path}{query}",
        data=body,
        method=method,
        headers={"Authorization": f"Bearer {live_node.node.dev_api_key}", "Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    assert status < 500, (method, path, body[:200], status)
    assert live_node.error_messages() == []
