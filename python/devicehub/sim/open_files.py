"""How many devices one simulator process can hold: each device is one socket, one open file (issue 32 #5: with a
limit of 20 000 per process, `--count 100000 --workers 4` started 79 928 devices and reported no failure)."""

from __future__ import annotations

import math
import resource

from devicehub.errors import StartupFailed

RESERVED = 64  # the interpreter, the event loop, the progress pipe, the latency probe's connection


def ensure_room(devices: int, workers: int) -> None:
    """Raise the soft limit on open files as far as the hard limit allows (children inherit it); when even that is
    too small for the busiest worker's devices, say so before starting anything."""
    per_process = math.ceil(devices / max(1, workers))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = per_process + RESERVED
    if wanted <= soft:
        return
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if ceiling > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        soft = ceiling
    if wanted > soft:
        enough = math.ceil(devices / max(1, soft - RESERVED))
        raise StartupFailed(
            f"{per_process} devices in one process need about {wanted} open files and the limit is {soft} "
            f"(ulimit -n): raise it, or use --workers {enough} or more"
        )
