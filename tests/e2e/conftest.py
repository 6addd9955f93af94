"""End-to-end fixtures: a real `devicehub serve` process on free ports with a fresh data directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.service import ServiceProcess


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    process = ServiceProcess(data_dir=tmp_path / "data").start()
    try:
        yield process
    finally:
        process.stop()
