"""The startup heap, frozen out of the cyclic garbage collector's way.

A process that serves Canopy holds about 290,000 objects that live as long as it does: the
modules, classes, functions and caches of Django, the apps, the URLconf's views, the agents'
tools and the model client. CPython's collector walks every one of them in each full
collection, with the GIL held, so that no other thread runs meanwhile. In the web process
with 120 agents working, one full collection stopped every thread for 246 to 333 ms, in
every second 4-second run of bench/gil.py (issue 25, round twenty-two).

`gc.freeze()` moves what is alive once the process has started to a permanent generation the
collector no longer walks: the full collections that follow walk only what came since (18,000
to 26,000 objects after startup), and took 57 to 92 ms in the same runs. Reference counting
still frees a frozen object that is no longer used; only one that ends in a reference cycle
stays. Freezing once, at startup, bounds that to what was alive then. Its own cost is one full
collection at startup: about 50 ms for the web process here, before it serves.
"""

import gc


def freeze_startup_heap() -> int:
    """Collect what startup left behind, then freeze the rest; the number of objects
    frozen in all. Call it once the process has imported what it will use (a second call,
    after more imports, freezes those too)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
