"""Bootstrap configurations through real HTTP (`/v3/bootstrap-configs`) and through `devicehub bootstrap` on the
data directory and on a real Redis: CRUD, validation, account scoping."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devicehub.cli import main
from devicehub.store.sqlite.store import SqliteStore
from support.node import run, running_node
from support.redis_server import redis_server

URI = "coap://127.0.0.1:5683"


def test_configs_are_created_replaced_listed_read_and_deleted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                psk = {
                    "server_uri": "coaps://dm.example:5684",
                    "security_mode": "psk",
                    "public_identity": base64.b64encode(b"dev-1").decode(),
                    "secret_key": base64.b64encode(b"\x01\x02\x03").decode(),
                    "lifetime": 600,
                    "binding": "UQ",
                }
                async with http.put("/v3/bootstrap-configs/dev-1", json=psk) as r:
                    assert r.status == 201, await r.text()
                    created = await r.json()
                assert created["object"] == "bootstrap-config" and created["security_mode"] == "psk"
                assert created["secret_key_set"] is True and "secret_key" not in created  # write-only
                assert base64.b64decode(created["public_identity"]) == b"dev-1"
                async with http.put("/v3/bootstrap-configs/dev-1", json={"server_uri": URI}) as r:
                    assert r.status == 200
                    replaced = await r.json()
                assert replaced["security_mode"] == "no_sec" and replaced["secret_key_set"] is False
                assert replaced["created_at"] == created["created_at"] and replaced["lifetime"] == 86400
                for name in ("dev-3", "dev-2"):
                    async with http.put(f"/v3/bootstrap-configs/{name}", json={"server_uri": URI}) as r:
                        assert r.status == 201
                async with http.get("/v3/bootstrap-configs?limit=2") as r:
                    page = await r.json()
                assert [c["endpoint_name"] for c in page["data"]] == ["dev-1", "dev-2"] and page["has_more"] is True
                async with http.get("/v3/bootstrap-configs?limit=2&after=dev-2") as r:
                    page = await r.json()
                assert [c["endpoint_name"] for c in page["data"]] == ["dev-3"] and page["has_more"] is False
                async with http.get("/v3/bootstrap-configs/dev-2") as r:
                    assert r.status == 200 and (await r.json())["server_uri"] == URI
                async with http.delete("/v3/bootstrap-configs/dev-2") as r:
                    assert r.status == 204
                for method in ("GET", "DELETE"):
                    async with http.request(method, "/v3/bootstrap-configs/dev-2") as r:
                        assert r.status == 404 and (await r.json())["type"] == "not_found"
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as anonymous:
                async with anonymous.get("/v3/bootstrap-configs") as r:
                    assert r.status == 401
                async with anonymous.get("/openapi.json") as r:
                    paths = (await r.json())["paths"]
                assert set(paths["/v3/bootstrap-configs/{endpoint_name}"]) == {"put", "get", "delete"}

    run(scenario())


BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"server_uri": "http://127.0.0.1:5683"}, "server_uri"),
    ({"server_uri": "coap://"}, "server_uri"),
    ({"server_uri": "coap://h:99999"}, "server_uri"),
    ({"server_uri": "coap://h:5683/rd?x=1"}, "server_uri"),
    ({"server_uri": URI, "security_mode": "tls"}, "security_mode"),
    ({"server_uri": "coaps://h:5684", "security_mode": "no_sec"}, "security_mode"),
    ({"server_uri": URI, "secret_key": base64.b64encode(b"k").decode()}, "security_mode"),
    ({"server_uri": "coaps://h:5684", "security_mode": "psk"}, "secret_key"),
    ({"server_uri": URI, "secret_key": "not base64!"}, "secret_key"),
    ({"server_uri": URI, "lifetime": 0}, "lifetime"),
    ({"server_uri": URI, "short_server_id": 65535}, "short_server_id"),
    ({"server_uri": URI, "binding": "X"}, "binding"),
    ({"server_uri": URI, "colour": "red"}, "colour"),
    ({}, "server_uri"),
]


def test_invalid_configs_are_refused_with_400_naming_the_field(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                for body, field in BAD_BODIES:
                    async with http.put("/v3/bootstrap-configs/dev-1", json=body) as r:
                        error = await r.json()
                        assert r.status == 400, body
                        assert error["type"] == "validation_error" and field in error["message"] + str(error["fields"])
                async with http.put("/v3/bootstrap-configs/" + "x" * 65, json={"server_uri": URI}) as r:
                    assert r.status == 400
                async with http.put("/v3/bootstrap-configs/dev-1", data=b"{") as r:
                    assert r.status == 400
                async with http.get("/v3/bootstrap-configs") as r:
                    assert (await r.json())["data"] == []  # nothing invalid was stored

    run(scenario())


def test_another_account_neither_sees_nor_takes_over_an_endpoint_name(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            other = await node.accounts.create_account("other")
            _, other_key = await node.accounts.create_key(other.id, admin=True)
            development = await node.store.find_account_by_name("development")
            assert development is not None
            await node.store.enroll(development.id, "enrolled-1")
            base = f"http://127.0.0.1:{node.http_port}"
            owner = aiohttp.ClientSession(base, headers={"Authorization": f"Bearer {node.dev_api_key}"})
            intruder = aiohttp.ClientSession(base, headers={"Authorization": f"Bearer {other_key}"})
            async with owner, intruder:
                async with owner.put("/v3/bootstrap-configs/dev-1", json={"server_uri": URI}) as r:
                    assert r.status == 201
                async with intruder.get("/v3/bootstrap-configs/dev-1") as r:
                    assert r.status == 404
                async with intruder.get("/v3/bootstrap-configs") as r:
                    assert (await r.json())["data"] == []
                for name in ("dev-1", "enrolled-1"):
                    async with intruder.put(f"/v3/bootstrap-configs/{name}", json={"server_uri": "coap://evil"}) as r:
                        assert r.status == 409, name
                async with intruder.delete("/v3/bootstrap-configs/dev-1") as r:
                    assert r.status == 404
                async with owner.get("/v3/bootstrap-configs/dev-1") as r:
                    assert (await r.json())["server_uri"] == URI

    run(scenario())


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_cli_sets_gets_lists_and_deletes_configs_in_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    with redis_server() if backend == "redis" else _no_redis() as redis_url:
        where = ["--redis-url", redis_url] if redis_url else ["--data-dir", str(tmp_path)]
        assert cli(capsys, "accounts", "create", "acme", *where)[0] == 0
        code, out, _ = cli(
            capsys, "bootstrap", "set", "dev-1", "--account", "acme", "--server-uri", URI, "--lifetime", "300", *where
        )
        assert code == 0 and out.split("\t")[:3] == ["dev-1", URI, "no_sec"] and "lt=300" in out
        psk = ["--server-uri", "coaps://h:5684", "--security-mode", "psk", "--identity", "dev-2"]
        code, out, _ = cli(
            capsys, "bootstrap", "set", "dev-2", "--account", "acme", *psk, "--secret-key-hex", "0a0b", *where
        )
        assert code == 0 and "\tpsk\t" in out
        code, _, err = cli(capsys, "bootstrap", "set", "dev-3", "--account", "acme", "--server-uri", "http://x", *where)
        assert code == 2 and "server_uri" in err
        code, out, _ = cli(capsys, "bootstrap", "list", "--account", "acme", *where)
        assert [line.split("\t")[0] for line in out.splitlines()] == ["dev-1", "dev-2"]
        assert cli(capsys, "bootstrap", "delete", "dev-1", "--account", "acme", *where)[0] == 0
        code, _, err = cli(capsys, "bootstrap", "get", "dev-1", "--account", "acme", *where)
        assert code == 2 and "no bootstrap configuration" in err
        code, out, _ = cli(capsys, "bootstrap", "get", "dev-2", "--account", "acme", *where)
        assert code == 0 and out.startswith("dev-2\tcoaps://h:5684\tpsk")

    if backend == "sqlite":  # what the command wrote is what the service reads

        async def check() -> None:
            store = SqliteStore(tmp_path)
            await store.open()
            try:
                stored = await store.get_bootstrap_config("dev-2")
                assert stored is not None and stored.public_identity == b"dev-2" and stored.secret_key == b"\n\x0b"
            finally:
                await store.close()

        run(check())


class _no_redis:
    def __enter__(self) -> str:
        return ""

    def __exit__(self, *exc: object) -> None:
        return None
