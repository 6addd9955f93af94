"""The suite runs on the event loop the product runs on (issue 28 #2): uvloop, set by tests/conftest.py for every
`asyncio.run`, helper and thread loop; the stdlib loop only where a test asks for it to compare (support/loops.py).
If the policy is ever dropped, these fail, not a deployment."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import uvloop

from support.loops import run_on
from support.node import run


async def loop_kind() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_asyncio_run_runs_on_uvloop() -> None:
    assert issubclass(asyncio.run(loop_kind()), uvloop.Loop)


def test_the_helper_tests_run_their_scenarios_with_runs_them_on_uvloop() -> None:
    seen: list[type[asyncio.AbstractEventLoop]] = []

    async def scenario() -> None:
        seen.append(await loop_kind())

    run(scenario())
    assert len(seen) == 1 and issubclass(seen[0], uvloop.Loop)


def test_a_loop_made_for_a_thread_is_uvloop() -> None:
    loop = asyncio.new_event_loop()  # as support.live_node.LiveNode makes its own
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_comparisons_get_the_loop_they_ask_for() -> None:
    assert issubclass(run_on("uvloop", loop_kind()), uvloop.Loop)
    stdlib = run_on("asyncio", loop_kind())
    assert issubclass(stdlib, asyncio.SelectorEventLoop) and not issubclass(stdlib, uvloop.Loop)


LEAVES_A_TRANSPORT_OPEN = """
import asyncio
from support.loops import use_uvloop

async def leave_open():
    await asyncio.get_running_loop().create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))

use_uvloop()
try:
    asyncio.run(leave_open())
except ResourceWarning as warning:
    print("ResourceWarning:", warning)
"""


def test_a_transport_left_open_fails_with_a_resource_warning_instead_of_hanging_the_loops_close() -> None:
    """In a process of its own, with warnings as errors as the suite has them: uvloop's own close would wait
    forever on the transport, and nothing in that process could end it but this timeout."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", LEAVES_A_TRANSPORT_OPEN],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ResourceWarning: unclosed resource <UDPTransport"), done.stdout
