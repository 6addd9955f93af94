"""Two `devicehub serve --dev` processes started at the same moment on one fresh Redis both come up (issue 31):
every start-up step that creates shared state (the development account, each node's key) is idempotent."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.redis_server import redis_server
from support.service import ServiceProcess

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


def _account_of(node: ServiceProcess, base_url: str) -> str:
    request = urllib.request.Request(f"{base_url}/v3/api-keys/me", headers={"Authorization": f"Bearer {node.api_key}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(json.load(response)["account_id"])


@pytest.mark.parametrize("data_dirs", ["one per node", "one shared"])
def test_two_dev_nodes_started_together_on_an_empty_redis_both_serve_one_account(
    tmp_path: Path, data_dirs: str
) -> None:
    with redis_server() as url:
        nodes = [
            ServiceProcess(
                data_dir=tmp_path / (name if data_dirs == "one per node" else "shared"),
                extra_args=("--redis-url", url, "--node-id", name),
            )
            for name in ("node-a", "node-b")
        ]
        with ThreadPoolExecutor(len(nodes)) as pool:  # both processes are launched before either is waited for
            starting = [pool.submit(node.start) for node in nodes]
            errors = [future.exception() for future in starting]
        try:
            assert errors == [None, None], "".join("".join(node.output) for node in nodes)
            # one development account, whose keys work on either node
            accounts = {_account_of(node, other.base_url) for node in nodes for other in nodes}
            assert len(accounts) == 1
            assert all(node.process is not None and node.process.poll() is None for node in nodes)
        finally:
            for node in nodes:
                node.stop()
