"""What one simulated device counts, for the simulator's progress line and report."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class DeviceCounters:
    registrations: int = 0
    updates: int = 0
    notifications: int = 0
    errors: int = 0
    requests: int = 0
    bootstraps: int = 0
    bootstrap_failures: int = 0
    register_failures: int = 0
    # failures by cause, for the simulator's report
    acked: int = 0  # confirmable notifications the server acknowledged
    busy: int = 0  # 5.03 answers (the server shed load)
    timeouts: int = 0  # no answer within the retransmission window
    rejected: int = 0  # any other error answer
