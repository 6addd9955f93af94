"""The ramp bench's trace of the collector's full passes in the node it starts (`overload_bench.py --ramp --gc-trace`).

Put first on the node's PYTHONPATH with DEVICEHUB_BENCH_GC_TRACE naming a file: every full (generation 2) pass of
the cyclic collector is appended there as one line, `<wall-clock start> <seconds> <CPU seconds of the thread>
<objects collected>`. The event loop stands still for each pass; a pass that collects nothing is pure pause (issue 30
#3: the tail after a ramp). Nothing happens without the variable, so the simulators the bench starts are untouched.
"""

import gc
import os
import time

_PATH = os.environ.get("DEVICEHUB_BENCH_GC_TRACE")

if _PATH:
    _out = open(_PATH, "a", buffering=1)  # open for the life of the process, one line a pass
    _began = [0.0, 0.0]

    def _trace(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            _began[0], _began[1] = time.time(), time.thread_time()
            return
        wall, cpu = time.time() - _began[0], time.thread_time() - _began[1]
        _out.write(f"{_began[0]:.4f} {wall:.4f} {cpu:.4f} {info['collected']}\n")

    gc.callbacks.append(_trace)
