"""The container entry point bootstraps a first account and key from the environment, once (issue 17 §9)."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

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

    plain = entrypoint(tmp_path / "other", "accounts", "list")  # no bootstrap variables: just the command
    assert plain.returncode == 0 and plain.stdout == "" and "bootstrap" not in plain.stderr


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
