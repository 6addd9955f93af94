"""Device credentials over REST and the CLI (issue 13 #3): Pelion's `/v2/device-shared-keys`, the
`/v3/trusted-certificates` subset, `devicehub psk|certs`; secrets sealed at rest and never returned."""

from __future__ import annotations

import io
import stat
import sys
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from devicehub.cli import main
from devicehub.domain.credentials import SecretBox, load_secret_key
from support.device_pki import TestCa
from support.node import run, running_node

NAME = "my-endpoint-00001"
SECRET = "4A4A4A4A4A4A4A4A4A4A4A4A4A4A4A4A"


def test_pre_shared_keys_api_follows_pelion(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_node(tmp_path) as node:
            other = (await node.accounts.create_account("other")).id
            _, other_key = await node.accounts.create_key(other, admin=True)
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                created = await http.post("/v2/device-shared-keys", json={"endpoint_name": NAME, "secret_hex": SECRET})
                assert created.status == 201
                again = await http.post("/v2/device-shared-keys", json={"endpoint_name": NAME, "secret_hex": SECRET})
                assert again.status == 409
                for body in (
                    {"endpoint_name": "fifteen-chars-1", "secret_hex": SECRET},  # 15 characters
                    {"endpoint_name": NAME + "\u00e9", "secret_hex": SECRET},  # not ASCII
                    {"endpoint_name": "another-endpoint-1", "secret_hex": "4a" * 15},  # 120 bits
                    {"endpoint_name": "another-endpoint-1", "secret_hex": "4a" * 65},  # 520 bits
                    {"endpoint_name": "another-endpoint-1", "secret_hex": "4a4"},  # odd
                    {"endpoint_name": "another-endpoint-1", "secret_hex": "zz" * 16},
                    {"endpoint_name": "another-endpoint-1"},
                ):
                    assert (await http.post("/v2/device-shared-keys", json=body)).status == 400, body
                for n in range(2):  # 0x and upper case are accepted; 512 bits is the most
                    body = {"endpoint_name": f"another-endpoint-{n}", "secret_hex": "0X" + "AB" * 64}
                    assert (await http.post("/v2/device-shared-keys", json=body)).status == 201
                page = await (await http.get("/v2/device-shared-keys", params={"limit": "2"})).json()
                assert [k["endpoint_name"] for k in page["data"]] == ["another-endpoint-0", "another-endpoint-1"]
                assert page["has_more"] and page["object"] == "list"
                rest = await (
                    await http.get("/v2/device-shared-keys", params={"after": page["continuation_marker"]})
                ).json()
                assert [k["endpoint_name"] for k in rest["data"]] == [NAME] and not rest["has_more"]
                one = await http.get(f"/v2/device-shared-keys/{NAME}")
                text = await one.text()
                assert one.status == 200 and set((await one.json()).keys()) == {"endpoint_name", "created_at"}
                assert SECRET.lower() not in text.lower()
                stranger = {"Authorization": f"Bearer {other_key}"}
                assert (await http.get(f"/v2/device-shared-keys/{NAME}", headers=stranger)).status == 404
                assert (await http.delete(f"/v2/device-shared-keys/{NAME}", headers=stranger)).status == 404
                assert (await http.delete(f"/v2/device-shared-keys/{NAME}")).status == 204
                assert (await http.get(f"/v2/device-shared-keys/{NAME}")).status == 404
            # sealed at rest: the store holds no clear key; the node's key file (0600) opens it
            stored = await node.store.get_shared_key("another-endpoint-0")
            assert stored is not None and bytes.fromhex("AB" * 64) not in stored.sealed_secret
            key_file = tmp_path / "secret.key"
            assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
            box = SecretBox(load_secret_key(key_file))
            assert box.open(stored.sealed_secret, "another-endpoint-0") == bytes.fromhex("AB" * 64)

    run(main())


def test_an_account_cannot_take_an_endpoint_name_of_another_account_and_is_not_told_whose_it_is(
    tmp_path: Path,
) -> None:
    """issue 28 #1: account B's key for a name enrolled into A (or holding A's key, or configured by A for
    bootstrap) is refused with 409 before anything is written, in words that name neither the other account nor
    what it holds; a key enrols its name, so A may not take a name B's key holds either."""

    async def main() -> None:
        async with running_node(tmp_path, dev=False) as node:
            a, b = [(await node.accounts.create_account(name)).id for name in ("tenant-a", "tenant-b")]
            await node.store.enroll(a, "enrolled-in-a-001")
            _, a_key = await node.accounts.create_key(a, admin=True)
            _, b_key = await node.accounts.create_key(b, admin=True)

            async def upload(key: str, name: str) -> tuple[int, str]:
                body = {"endpoint_name": name, "secret_hex": SECRET}
                async with http.post(
                    "/v2/device-shared-keys", json=body, headers={"Authorization": f"Bearer {key}"}
                ) as r:
                    return r.status, await r.text()

            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
                assert (await upload(a_key, "with-a-key-of-a-1"))[0] == 201
                config = {"server_uri": "coap://10.0.0.1:5683", "security_mode": "no_sec"}
                put = await http.put(
                    "/v3/bootstrap-configs/configured-by-a-1", json=config, headers={"Authorization": f"Bearer {a_key}"}
                )
                assert put.status == 201, await put.text()
                for name in ("enrolled-in-a-001", "with-a-key-of-a-1", "configured-by-a-1"):
                    status, text = await upload(b_key, name)
                    assert status == 409, (name, status, text)
                    assert "not available" in text and a not in text and "pre-shared key" not in text, text
                    assert await node.store.enrolled_account(name) in (a, None)
                assert (await node.store.get_shared_key("enrolled-in-a-001")) is None  # nothing written
                assert (await upload(a_key, "enrolled-in-a-001"))[0] == 201  # its own account may
                assert (await upload(b_key, "fresh-name-for-b1"))[0] == 201
                assert await node.store.enrolled_account("fresh-name-for-b1") == b  # the key enrolled it
                assert (await upload(a_key, "fresh-name-for-b1"))[0] == 409

    run(main())


def test_device_credentials_are_managed_by_administrator_keys_only(tmp_path: Path) -> None:
    """issue 28 #1: a Developers key gets 403 on every pre-shared key, trusted CA and bootstrap configuration call,
    and nothing is written."""

    async def main() -> None:
        ca = TestCa(tmp_path / "pki")
        async with running_node(tmp_path / "svc", dev=False) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            _, developer = await node.accounts.create_key(tenant)
            headers = {"Authorization": f"Bearer {developer}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                calls = [
                    http.post("/v2/device-shared-keys", json={"endpoint_name": NAME, "secret_hex": SECRET}),
                    http.get("/v2/device-shared-keys"),
                    http.get(f"/v2/device-shared-keys/{NAME}"),
                    http.delete(f"/v2/device-shared-keys/{NAME}"),
                    http.post("/v3/trusted-certificates", json={"certificate": ca.pem.decode()}),
                    http.get("/v3/trusted-certificates"),
                    http.delete("/v3/trusted-certificates/0123"),
                    http.put(f"/v3/bootstrap-configs/{NAME}", json={"server_uri": "coap://10.0.0.1:5683"}),
                    http.get("/v3/bootstrap-configs"),
                    http.delete(f"/v3/bootstrap-configs/{NAME}"),
                ]
                for call in calls:
                    async with call as response:
                        assert response.status == 403, (response.method, response.url, await response.text())
                        assert (await response.json())["type"] == "forbidden"
            assert await node.store.get_shared_key(NAME) is None
            assert await node.store.list_trusted_cas(tenant) == []
            assert await node.store.get_bootstrap_config(NAME) is None

    run(main())


def test_an_endpoint_name_with_a_percent_sign_is_addressed_by_its_percent_encoding(tmp_path: Path) -> None:
    """`a%2541b` in the path is the name `a%41b`, decoded once (by the router), not `aAb`."""

    async def main() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                name, decoded_twice = "endpoint%41-percent", "endpointA-percent"
                for endpoint in (name, decoded_twice):
                    body = {"endpoint_name": endpoint, "secret_hex": SECRET}
                    assert (await http.post("/v2/device-shared-keys", json=body)).status == 201
                url = URL(
                    f"http://127.0.0.1:{node.http_port}/v2/device-shared-keys/endpoint%2541-percent", encoded=True
                )
                async with http.get(url) as one:
                    assert one.status == 200 and (await one.json())["endpoint_name"] == name
                assert (await http.delete(url)).status == 204
                page = await (await http.get("/v2/device-shared-keys")).json()
                assert [k["endpoint_name"] for k in page["data"]] == [decoded_twice]

    run(main())


def test_trusted_certificates_api_adds_lists_and_removes_a_ca(tmp_path: Path) -> None:
    async def main() -> None:
        ca = TestCa(tmp_path / "pki")
        leaf = ca.issue("not-a-ca-device-01")
        async with running_node(tmp_path / "svc") as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                created = await http.post(
                    "/v3/trusted-certificates", json={"name": "devices", "certificate": ca.pem.decode()}
                )
                assert created.status == 201
                body = await created.json()
                assert body["subject"] == "CN=Test Device CA" and body["service"] == "lwm2m"
                listed = await (await http.get("/v3/trusted-certificates")).json()
                assert [c["id"] for c in listed["data"]] == [body["id"]]
                not_ca = await http.post("/v3/trusted-certificates", json={"certificate": leaf.pem.decode()})
                assert not_ca.status == 400
                assert (await http.post("/v3/trusted-certificates", json={"certificate": "junk"})).status == 400
                assert (await http.delete(f"/v3/trusted-certificates/{body['id']}")).status == 204
                assert (await http.get(f"/v3/trusted-certificates/{body['id']}")).status == 404

    run(main())


def test_cli_manages_keys_and_cas_of_an_account(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = TestCa(tmp_path / "pki")
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.pem)
    data = ["--data-dir", str(tmp_path / "data")]

    def cli(*args: str, stdin: str = "") -> str:  # the real entry point, in this process (fast)
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        assert main([*args, *data]) == 0
        return capsys.readouterr().out

    cli("accounts", "create", "acme")
    monkeypatch.setattr(sys, "stdin", io.StringIO(SECRET + "\n"))
    assert main(["psk", "add", "acme", "dev-1", "-", *data]) == 2  # issue 32 #5: the rule, not only "invalid"
    assert "16-64 printable ASCII characters (got 5 characters)" in capsys.readouterr().err
    cli("psk", "add", "acme", NAME, "-", stdin=SECRET + "\n")
    assert cli("psk", "list", "acme").split("\t")[0] == NAME
    ca_id = cli("certs", "add", "acme", str(ca_file)).split("\t")[0]
    assert ca_id in cli("certs", "list", "acme")
    cli("certs", "remove", "acme", ca_id)
    cli("psk", "remove", "acme", NAME)
    assert cli("psk", "list", "acme") == "" and cli("certs", "list", "acme") == ""


def test_cli_enrol_does_not_move_a_name_of_another_account_unless_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 28 #1: `accounts enroll` of a name another account holds (here through its key) changes nothing and
    exits 2, saying so; `--move` takes it over."""
    data = ["--data-dir", str(tmp_path / "data")]
    for name in ("acme", "rival"):
        assert main(["accounts", "create", name, *data]) == 0
    assert main(["accounts", "enroll", "acme", "device-of-acme-01", *data]) == 0
    capsys.readouterr()
    assert main(["accounts", "enroll", "rival", "device-of-acme-01", "unclaimed-name-01", *data]) == 2
    assert "device-of-acme-01 enrolled into another account; nothing enrolled" in capsys.readouterr().err
    assert main(["accounts", "enroll", "acme", "device-of-acme-01", "unclaimed-name-01", *data]) == 0  # its own: fine
    assert main(["accounts", "enroll", "rival", "device-of-acme-01", "--move", *data]) == 0
    assert "enrolled 1 endpoint name(s) into rival" in capsys.readouterr().out
