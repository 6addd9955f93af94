"""The UDP fuzz harness in the suite (issue 14 #12): a few thousand mutated real-client datagrams at a live
process; it survives, still registers a device, and its RSS stays near the baseline."""

from __future__ import annotations

import asyncio

import pytest
from udp_fuzz import run_fuzz


@pytest.mark.e2e
def test_mutated_client_datagrams_leave_the_service_registering_and_its_memory_near_baseline() -> None:
    result = asyncio.run(run_fuzz(4000, seed=14))
    assert result.sent >= 4000
    assert result.alive and result.registered_after
    assert result.growth_mib < 32, result
