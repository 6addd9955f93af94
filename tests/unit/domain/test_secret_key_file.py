"""The node's sealing key file (issue 31): nodes sharing a data directory that start together agree on one key."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from devicehub.domain.credentials import load_secret_key


def test_nodes_making_the_key_together_all_read_the_one_that_won(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secret.key"
    start, keys = threading.Barrier(8), []

    def node() -> None:
        start.wait()
        keys.append(load_secret_key(path))

    threads = [threading.Thread(target=node) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) == 32
    assert bytes.fromhex(path.read_text().strip()) == keys[0]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret.key"]  # no temporary file left behind
