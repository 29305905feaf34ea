"""research.settings, plus a record of the cyclic garbage collector's pauses, for
`bench/gil.py --gc` and `--gc-off`.

The benchmark starts daphne with DJANGO_SETTINGS_MODULE=gc_settings (bench/ on the path) and
CANOPY_GC_LOG=<file>. Each collection's generation and duration (wall and the collecting
thread's CPU, in ms) is noted from `gc.callbacks`; a collection holds the GIL throughout, so
its wall time is a pause for every thread of the process. On SIGUSR1 the process writes the
collections so far to that file as JSON, and the benchmark takes those of a load.
CANOPY_GC=off turns the collector off for the process's life (after startup's own collection
and freeze, research.ops.heap): what a load looks like with no pause at all.
"""

import gc
import json
import os
import signal
import time

from research.settings import *  # noqa: F403

_LOG = os.environ.get("CANOPY_GC_LOG")
_collections: list[tuple[int, float, float]] = []
_began: dict[str, float] = {}
# No lock: the GIL makes append and list() whole, and a lock held while list() allocates could
# be asked for again by the collection that allocation starts, in the same thread.


def _noted(phase: str, info: dict) -> None:
    if phase == "start":
        _began["wall"], _began["cpu"] = time.perf_counter(), time.thread_time()
        return
    wall = (time.perf_counter() - _began["wall"]) * 1000
    cpu = (time.thread_time() - _began["cpu"]) * 1000
    _collections.append((info["generation"], wall, cpu))


def _write(signum, frame) -> None:
    path = f"{_LOG}.part"
    noted = list(_collections)
    with open(path, "w") as file:
        json.dump(noted, file)
    os.replace(path, _LOG)


if _LOG:
    gc.callbacks.append(_noted)
    signal.signal(signal.SIGUSR1, _write)
if os.environ.get("CANOPY_GC") == "off":
    gc.disable()
