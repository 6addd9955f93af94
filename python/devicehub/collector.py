"""The cyclic garbage collector's full passes on a node holding a large fleet (issue 16).

CPython runs a full pass whenever the objects promoted to the oldest generation since the last one reach a quarter of
those it kept; a pass walks every tracked object the process holds. With 100 000 registered devices that is millions
of objects, and a registration storm (which replaces every device's registration objects) triggered a pass every 3-6 s,
each 0.6-2.5 s long with nothing collected: the event loop stood still for up to a third of the storm and the kernel
dropped the Registers that arrived meanwhile (measured with a `gc.callbacks` hook, `bench/scale_bench.py`).

`SurvivorFreezer` freezes what survived each full pass (`gc.freeze`), so the next pass walks only what was promoted
since. A full pass has just collected the younger generations too, so what is frozen is exactly what was reachable
then. The price: a reference cycle frozen while reachable that becomes garbage later is not collected (refcounting
still frees everything else). The registry's own records hold no cycles; `cyclic_garbage()` measures what a run left.
"""

from __future__ import annotations

import gc
import time
from typing import Any

OLDEST = 2


class SurvivorFreezer:
    def __init__(self) -> None:
        self.full_collections = 0
        self.full_collection_seconds = 0.0
        self._started: float | None = None
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._on_collection)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_collection)
            self._installed = False

    @property
    def frozen(self) -> int:
        return gc.get_freeze_count()

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != OLDEST:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is not None:
            self.full_collections += 1
            self.full_collection_seconds += time.perf_counter() - self._started
            self._started = None
        # called while the collector still holds its lists consistent and before anything new is allocated:
        # the younger generations are empty now, so this freezes only the pass's survivors
        gc.freeze()


def installed_freezer() -> SurvivorFreezer | None:
    """The freezer `serve` installed in this process, if any (read by /metrics)."""
    for callback in gc.callbacks:
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, SurvivorFreezer):
            return owner
    return None


def cyclic_garbage() -> int:
    """Unfreeze and run a full pass: the unreachable objects it finds are what freezing kept alive. A measurement
    (it walks everything, as the passes this module avoids did); the survivors are frozen again."""
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    return found
