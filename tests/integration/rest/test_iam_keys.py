"""API keys over HTTP (issue 11 point 7), replaying Pelion's system-test libraries call for call: the
`izuma_systest_lib` (PelionIoT/e2e-edge-test-suite) `new_temp_test_case_developer_api_key` fixture and the
`client_test_lib` (PelionIoT/client-e2e-python-test-library) `api_key` fixture, with their headers and bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from devicehub.node import Node
from support.node import run, running_node


def headers(key: str) -> dict[str, str]:
    # izuma_systest_lib RestAPI: these three headers on every call, the body as json.dumps(payload)
    return {"User-Agent": "SyTe FuTe", "Content-type": "application/json", "Authorization": f"Bearer {key}"}


async def call(http: aiohttp.ClientSession, method: str, url: str, key: str, payload: Any = None) -> tuple[int, Any]:
    data = json.dumps(payload) if payload is not None else None
    async with http.request(method, url, headers=headers(key), data=data) as r:
        text = await r.text()
        return r.status, (json.loads(text) if text and r.content_type == "application/json" else text)


def base(node: Node) -> str:
    return f"http://127.0.0.1:{node.http_port}"


def test_the_system_test_library_mints_uses_and_deletes_a_developer_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, aiohttp.ClientSession(base(node)) as http:
            admin = node.dev_api_key or ""
            # iam.create_api_key(cloud, 'Developers'): find the group by name in GET /v3/policy-groups
            status, groups = await call(http, "GET", "/v3/policy-groups", admin)
            assert status == 200
            assert sorted(g["name"] for g in groups["data"]) == ["Administrators", "Developers"]
            developers = next(g["id"] for g in groups["data"] if g["name"] == "Developers")
            # IamAPI.create_api_key(group_id, expected_status_code=201)
            status, created = await call(
                http, "POST", "/v3/api-keys", admin, {"name": "Syte_dynamic_local_API_key", "groups": [developers]}
            )
            assert status == 201, created
            assert created["key"].startswith("ak_") and created["groups"] == [developers]
            assert created["object"] == "api-key" and created["status"] == "ACTIVE"
            temp_key, temp_id = created["key"], created["id"]

            # the test then runs with the new key
            status, _ = await call(http, "GET", "/v3/devices", temp_key)
            assert status == 200
            # a Developers key may not manage keys
            for method, url, payload in (
                ("GET", "/v3/api-keys", None),
                ("GET", "/v3/policy-groups", None),
                ("POST", "/v3/api-keys", {"name": "escalate"}),
                ("DELETE", f"/v3/api-keys/{temp_id}", None),
            ):
                status, error = await call(http, method, url, temp_key, payload)
                assert status == 403 and error["type"] == "forbidden", (method, url, status)

            status, listing = await call(http, "GET", "/v3/api-keys", admin)
            assert status == 200 and temp_id in [k["id"] for k in listing["data"]]
            assert all("key" not in k for k in listing["data"])  # the secret was shown once
            status, one = await call(http, "GET", f"/v3/api-keys/{temp_id}", admin)
            assert status == 200 and one["name"] == "Syte_dynamic_local_API_key" and "key" not in one

            # fixture teardown: cloud_api.iam.delete_api_key(resp['id'], expected_status_code=204)
            status, _ = await call(http, "DELETE", f"/v3/api-keys/{temp_id}", admin)
            assert status == 204
            status, _ = await call(http, "GET", "/v3/devices", temp_key)
            assert status == 401
            status, listing = await call(http, "GET", "/v3/api-keys", admin)
            assert temp_id not in [k["id"] for k in listing["data"]]
            status, _ = await call(http, "DELETE", f"/v3/api-keys/{temp_id}", admin)
            assert status == 404

    run(scenario())


def test_the_client_test_library_creates_a_key_without_groups_and_admins_can_make_admins(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, aiohttp.ClientSession(base(node)) as http:
            admin = node.dev_api_key or ""
            # client_test_lib api_key fixture: {"name": "pelion_e2e_dynamic_api_key"} → 201, resp["key"], resp["id"]
            status, plain = await call(http, "POST", "/v3/api-keys", admin, {"name": "pelion_e2e_dynamic_api_key"})
            assert status == 201 and plain["key"] and plain["id"]
            status, _ = await call(http, "GET", "/v3/api-keys", plain["key"])
            assert status == 403  # no group named: a Developers key

            _, groups = await call(http, "GET", "/v3/policy-groups", admin)
            administrators = next(g["id"] for g in groups["data"] if g["name"] == "Administrators")
            status, second = await call(
                http, "POST", "/v3/api-keys/", admin, {"name": "ops", "groups": [administrators]}
            )
            assert status == 201
            status, listing = await call(http, "GET", "/v3/api-keys", second["key"])
            assert status == 200 and {k["name"] for k in listing["data"]} >= {
                "dev",
                "ops",
                "pelion_e2e_dynamic_api_key",
            }
            assert listing["total_count"] == len(listing["data"])
            status, _ = await call(http, "DELETE", f"/v3/api-keys/{plain['id']}", second["key"])
            assert status == 204

            for payload in ({"name": "x", "groups": ["0" * 32]}, {"name": ""}, {"name": "x", "colour": "red"}, {}):
                status, error = await call(http, "POST", "/v3/api-keys", admin, payload)
                assert status == 400 and error["type"] == "validation_error", (payload, status, error)

            # another account's administrator sees none of these keys and cannot delete them
            other = await node.accounts.create_account("other")
            _, other_admin = await node.accounts.create_key(other.id, "root", admin=True)
            status, listing = await call(http, "GET", "/v3/api-keys", other_admin)
            assert status == 200 and [k["name"] for k in listing["data"]] == ["root"]
            status, _ = await call(http, "DELETE", f"/v3/api-keys/{second['id']}", other_admin)
            assert status == 404

    run(scenario())
