"""The node's cyclic garbage collector: what start-up built frozen out of its passes, young collections rare.

Issue 30 #2: a fleet's events each leave a few objects alive for one write-behind interval (a device's dict of values
per flush, the log's per-device entry, a channel's queued event). At CPython's default threshold (a young collection
every 700 net allocations) a collection catches hundreds of them in flight and promotes them; each time the promoted
reach a quarter of the old generation a full pass walks every object the process holds — with 10 000 devices
registered, one every ~5 s of 75-300 ms, 1.6-3.6 µs per event against ~0.1 µs at 200 devices (a `gc.callbacks`
timer, bench/README.md "The fleet shape"). At 50 000 net allocations (the simulator's threshold, sim/run.py) the
event path's objects die before a young collection comes: in the fleet's steady state none ran in 13 s. Cyclic
garbage still goes: a collection runs once 50 000 allocations outlive their turn (a registration storm's records)."""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000  # net allocations of tracked objects between young collections (CPython's default: 700)


def settle() -> None:
    """Once start-up is done: its objects (modules, routes, the store's caches) frozen out of every later pass, since
    they live as long as the process; young collections every `YOUNG_THRESHOLD` allocations; the older generations'
    thresholds left as they are."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
