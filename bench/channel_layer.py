"""The channel layer's own CPU per pushed message, without Redis: Channels' in-memory layer
against frontend.layers.LocalChannelLayer, the layer of a process with no REDIS_URL.

    .venv/bin/python bench/channel_layer.py
    .venv/bin/python bench/channel_layer.py --messages 50000 --viewers 1 20 40

One asyncio loop, one group per tree and one viewer's channel in each. Each message is one
event of a tree (the shape of a `run.usage` with its state), sent to its group as
frontend.delivery sends it and received as the consumer receives it. `--viewers` sets how
many trees have a viewer at once: the in-memory layer sweeps every channel and group at each
group send and receive. The figure is the loop thread's CPU (`time.thread_time`) per message; the
socket's own work (JSON, the frame) is not in it.
"""

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

EVENT = {
    "type": "run.usage",
    "seq": 12,
    "run": 345,
    "at": "2026-12-05T07:00:00.123456+00:00",
    "input_tokens": 1234,
    "output_tokens": 56,
    "cost_usd": "0.0012",
    "totals": {"input_tokens": 12345, "output_tokens": 567, "cost_usd": "0.012"},
    "status": "working",
    "state": "searching",
    "detail": "otters and their rivers",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--viewers", type=int, nargs="*", default=[1, 20, 40])
    options = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "research.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-anything-else-0123456789")
    import django

    django.setup()
    from channels.layers import InMemoryChannelLayer

    from frontend.delivery import EVENTS_MESSAGE, group_name
    from frontend.layers import LocalChannelLayer

    async def per_message(layer_class: type, viewers: int) -> float:
        layer = layer_class()
        channels = [await layer.new_channel() for _ in range(viewers)]
        for tree, channel in enumerate(channels):
            await layer.group_add(group_name(tree), channel)
        started = time.thread_time()
        for number in range(options.messages):
            tree = number % viewers
            await layer.group_send(group_name(tree), {"type": EVENTS_MESSAGE, "events": [EVENT]})
            await layer.receive(channels[tree])
        return (time.thread_time() - started) / options.messages

    print("| viewers | Channels' in-memory layer | LocalChannelLayer |")
    print("| --- | --- | --- |")
    for viewers in options.viewers:
        before, after = (
            asyncio.run(per_message(layer, viewers))
            for layer in (InMemoryChannelLayer, LocalChannelLayer)
        )
        print(f"| {viewers} | {before * 1e6:.1f} µs | {after * 1e6:.1f} µs |", flush=True)


if __name__ == "__main__":
    main()
