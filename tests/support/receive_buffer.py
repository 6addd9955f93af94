"""The kernel's cap on a socket's receive buffer, for tests of bursts the default buffer cannot hold."""

from __future__ import annotations

import pytest


def rmem_max() -> int:
    """`net.core.rmem_max`: the most SO_RCVBUF a socket is granted (Linux reports twice the grant)."""
    with open("/proc/sys/net/core/rmem_max") as limit:
        return int(limit.read())


def holds_burst(size: int) -> pytest.MarkDecorator:
    """Skip a burst test where the kernel would not grant a buffer of `size` bytes: the test could not hold the
    burst with or without the listener's wide buffer, so it would show nothing (raise the sysctl to run it)."""
    return pytest.mark.skipif(rmem_max() < size, reason="net.core.rmem_max caps the receive buffer below the burst")
