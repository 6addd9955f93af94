"""Fuzz targets: a few seconds in the suite; `HYPOTHESIS_PROFILE=fuzz-long` runs each for much longer."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from support.live_node import LiveNode

settings.register_profile("fuzz-suite", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz-ci", max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz-long", max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "fuzz-suite"))


@pytest.fixture(scope="module")
def live_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveNode]:
    data_dir: Path = tmp_path_factory.mktemp("fuzz-node")
    node = LiveNode(data_dir)
    try:
        yield node
    finally:
        node.close()
