"""The container entry point bootstraps a first account and key from the environment, once (issue 17 §9)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from devicehub.config import ENV_PREFIX, ServeSettings
from devicehub.domain.credentials import SecretBox
from devicehub.store import open_store
from support.redis_server import redis_server

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"

pytestmark = pytest.mark.e2e


def entrypoint(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEHUB_")}
    bin_dir = str(Path(sys.executable).parent)  # where the `devicehub` script of this environment lives
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "PATH": bin_dir + os.pathsep + clean.get("PATH", ""), "DEVICEHUB_DATA_DIR": str(tmp_path), **env},
    )


def test_entrypoint_bootstraps_account_endpoints_and_key_once(tmp_path: Path) -> None:
    assert shutil.which("devicehub", path=str(Path(sys.executable).parent))
    key_file = tmp_path / "api-key"
    env = {
        "DEVICEHUB_BOOTSTRAP_ACCOUNT": "demo",
        "DEVICEHUB_BOOTSTRAP_ENDPOINTS": "sim-0 sim-1",
        "DEVICEHUB_BOOTSTRAP_KEY_FILE": str(key_file),
    }
    first = entrypoint(tmp_path, "keys", "list", "--account", "demo", **env)
    assert first.returncode == 0, first.stderr
    assert "created account demo" in first.stderr and "enrolled 2 endpoint name(s) into demo" in first.stderr
    assert first.stdout.count("\tbootstrap\tactive") == 1  # then `devicehub keys list` ran with the same store
    assert key_file.read_text().strip().startswith("ak_")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

    again = entrypoint(tmp_path, "keys", "list", "--account", "demo", **env)
    assert again.returncode == 0 and "account demo exists; no bootstrap" in again.stderr
    assert again.stdout.count("\tbootstrap\tactive") == 1  # no second key

    # issue 32 #4: a key file that went missing (its first writing failed, the volume was emptied) is made again
    key_file.unlink()
    healed = entrypoint(tmp_path, "keys", "list", "--account", "demo", **env)
    assert healed.returncode == 0 and f"account demo exists but {key_file} did not" in healed.stderr
    assert healed.stdout.count("\tbootstrap\tactive") == 2 and key_file.read_text().strip().startswith("ak_")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

    plain = entrypoint(tmp_path / "other", "accounts", "list")  # no bootstrap variables: just the command
    assert plain.returncode == 0 and plain.stdout == "" and "bootstrap" not in plain.stderr


def test_a_key_file_that_cannot_be_written_stops_the_bootstrap_before_it_creates_anything(tmp_path: Path) -> None:
    """issue 32 #4: compose's key volume was root-owned; node-a created the account and key, failed writing the
    key, and every later start found the account and wrote nothing. Now the place is checked first."""
    not_a_dir = tmp_path / "keys"
    not_a_dir.write_text("a file where the key volume should be")
    env = {"DEVICEHUB_BOOTSTRAP_ACCOUNT": "demo", "DEVICEHUB_BOOTSTRAP_KEY_FILE": str(not_a_dir / "api-key")}
    refused = entrypoint(tmp_path / "data", "accounts", "list", **env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"devicehub-entrypoint: cannot write the API key file {not_a_dir / 'api-key'}: {not_a_dir} is not a "
        f"directory uid {os.getuid()} can write"
    ]
    assert entrypoint(tmp_path / "data", "accounts", "list").stdout == ""  # no account was made


@pytest.mark.redis
def test_two_containers_bootstrapping_one_account_as_they_start_together_make_it_and_its_key_once(
    tmp_path: Path,
) -> None:
    """issue 31: nodes started at the same moment on one Redis, each with the bootstrap variables (a look for the
    account before creating it let both create: the second failed and its container exited)."""
    with redis_server() as url:
        env = {"DEVICEHUB_BOOTSTRAP_ACCOUNT": "demo", "DEVICEHUB_REDIS_URL": url}
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda n: entrypoint(tmp_path / str(n), "accounts", "list", **env), (1, 2)))
        assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
        said = sorted(run.stderr.splitlines()[-1] for run in runs)
        assert said[0].startswith("devicehub-entrypoint: account demo exists; no bootstrap"), said
        assert said[1].startswith("devicehub-entrypoint: created account demo; its API key (shown once): ak_"), said
        keys = entrypoint(tmp_path / "3", "keys", "list", "--account", "demo", DEVICEHUB_REDIS_URL=url)
        assert keys.stdout.count("\tbootstrap\tactive") == 1


def test_entrypoint_keeps_a_secret_key_from_the_environment_out_of_the_data_directory(tmp_path: Path) -> None:
    """issue 28: DEVICEHUB_SECRET_KEY seals the device secrets; no key file is made beside the data, so a backup of
    the data directory does not hold the key that opens them."""
    data, key = tmp_path / "data", "5a" * 32
    env = {"DEVICEHUB_SECRET_KEY": key}
    assert entrypoint(data, "accounts", "create", "acme", **env).returncode == 0
    added = subprocess.run(
        ["sh", str(ENTRYPOINT), "psk", "add", "acme", "sealed-device-0001", "-"],
        input="4a" * 16 + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DEVICEHUB_DATA_DIR": str(data), **env},
    )
    assert added.returncode == 0, added.stderr
    assert not (data / "secret.key").exists()
    both = entrypoint(data, "accounts", "list", DEVICEHUB_SECRET_KEY_FILE=str(tmp_path / "k"), **env)
    assert both.returncode == 2 and "not both" in both.stderr

    async def sealed() -> bytes:
        store = open_store(data, "")
        await store.open()
        try:
            record = await store.get_shared_key("sealed-device-0001")
        finally:
            await store.close()
        assert record is not None
        return SecretBox(bytes.fromhex(key)).open(record.sealed_secret, "sealed-device-0001")

    assert asyncio.run(sealed()) == bytes.fromhex("4a" * 16)


def test_dockerfile_and_context_rules() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'VOLUME ["/data"]' in dockerfile
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
    assert "USER 10001" in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    for entry in (".git", "target/", "devicehub-data/"):
        assert entry in ignored
    compose = (ROOT / "compose.yaml").read_text()
    for service in ("redis:", "node-a:", "node-b:", "lb:", "simulator:"):
        assert f"\n  {service}" in compose
    hadolint = shutil.which("hadolint")
    if hadolint is not None:  # the lint group installs it; CI also runs it in .ci/run
        result = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, cwd=ROOT)
        assert result.returncode == 0, result.stdout


ENTRYPOINT_VARIABLES = {
    "DEVICEHUB_BOOTSTRAP_ACCOUNT",
    "DEVICEHUB_BOOTSTRAP_ENDPOINTS",
    "DEVICEHUB_BOOTSTRAP_KEY_FILE",
    "DEVICEHUB_SECRET_KEY",
}


def served(data_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The entry point running `serve` (compose's command) until it says it serves, then stopped by SIGTERM."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEHUB_")}
    bin_dir = str(Path(sys.executable).parent)
    ports = ("--http-port", "0", "--coap-port", "0", "--coaps-port", "0")
    process = subprocess.Popen(
        ["sh", str(ENTRYPOINT), "serve", *ports],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**clean, "PATH": bin_dir + os.pathsep + clean.get("PATH", ""), "DEVICEHUB_DATA_DIR": str(data_dir), **env},
    )
    assert process.stdout is not None
    said = []
    with process.stdout:
        for line in process.stdout:  # ends at exit if it never serves
            said.append(line)
            if line.startswith("devicehub: HTTP"):  # stopped as soon as it says it serves: it must still exit
                process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=30)
    return subprocess.CompletedProcess(process.args, code, "".join(said), "".join(said))


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.redis
def test_compose_wiring_starts_both_nodes_from_empty_volumes_and_again(tmp_path: Path) -> None:
    """issue 32 #4 without a container engine: compose.yaml's node environments, run through the entry point with
    its volumes as directories here, on a real Redis: both nodes start from empty volumes and again from the
    filled ones, share one sealing key, and every variable they set is one devicehub or the entry point reads."""
    services = _compose()["services"]
    nodes = {name: service for name, service in services.items() if name.startswith("node-")}
    settings = {ENV_PREFIX + f.name.upper() for f in dataclasses.fields(ServeSettings)}
    volumes = {"keys": tmp_path / "keys"}
    volumes["keys"].mkdir()
    with redis_server() as url:

        def start(name: str) -> subprocess.CompletedProcess[str]:
            service = nodes[name]
            assert service["restart"] == "unless-stopped"
            env = {k: str(v) for k, v in service["environment"].items()}
            assert set(env) <= settings | ENTRYPOINT_VARIABLES, set(env) - settings - ENTRYPOINT_VARIABLES
            assert env["DEVICEHUB_ALLOW_NOSEC"] == "true"  # the simulator speaks plain CoAP to the balancer
            mounts = dict(mount.split(":") for mount in service.get("volumes", []))
            for variable in ("DEVICEHUB_BOOTSTRAP_KEY_FILE", "DEVICEHUB_SECRET_KEY_FILE"):
                if variable in env:  # a file the node writes lives on a volume it mounts
                    volume = next(v for v, at in mounts.items() if env[variable].startswith(at + "/"))
                    env[variable] = str(volumes[volume]) + env[variable][len(mounts[volume]) :]
            env["DEVICEHUB_REDIS_URL"] = url
            return served(tmp_path / name, env)

        first = {name: start(name) for name in sorted(nodes)}
        assert all(run.returncode == 0 for run in first.values()), {n: r.stderr for n, r in first.items()}
        assert "created account demo; its API key is in" in first["node-a"].stderr
        again = {name: start(name) for name in sorted(nodes)}
        assert all(run.returncode == 0 for run in again.values()), {n: r.stderr for n, r in again.items()}
        assert "account demo exists; no bootstrap" in again["node-a"].stderr
    assert (volumes["keys"] / "api-key").read_text().startswith("ak_")
    assert len((volumes["keys"] / "secret.key").read_text().strip()) == 64  # one key, both nodes read it
    assert not list((tmp_path / "node-a").glob("secret.key")) and not list((tmp_path / "node-b").glob("secret.key"))


def test_compose_services_point_at_each_other() -> None:
    """The balancer's upstreams are compose's node services on the ports they listen on, the simulator talks to
    the balancer's CoAP port, the image makes the key volume's mount point for its user, and its health check
    follows DEVICEHUB_HTTP_PORT."""
    services = _compose()["services"]
    nginx = (ROOT / "docker" / "nginx.conf").read_text()
    nodes = sorted(name for name in services if name.startswith("node-"))
    for node in nodes:
        assert f"server {node}:8000;" in nginx and f"server {node}:5683 " in nginx
    assert "5683:5683/udp" in services["lb"]["ports"] and "listen 5683 udp" in nginx
    assert services["simulator"]["command"][:3] == ["simulate", "--server", "coap://lb:5683"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "mkdir -p /data /keys && chown 10001:10001 /data /keys" in dockerfile
    assert "DEVICEHUB_HTTP_PORT" in dockerfile.split("HEALTHCHECK", 1)[1]
    assert "--default-toolchain 1." in dockerfile  # rustup pinned
