"""The CPU of pushing events to Redis's pub/sub layer, per release of a tree's events:
channels_redis's `group_send` on a loop of its own (how this process pushed them until round
twenty-five of issue 25, and how it still pushes with Redis's lists layer) against
frontend.publisher.RedisPublisher (one thread, a plain client, one pipeline a wake-up).

    .venv/bin/python bench/publisher.py
    .venv/bin/python bench/publisher.py --trees 33 --bursts 400 --per-burst 8

Each burst is what a step writer's batch releases at once: `--per-burst` releases, each of
one tree among `--trees`, one event each (the shape of a `run.usage`). The group send path
sends each tree's releases one after another and the trees side by side, as
frontend.delivery's lines do; the publisher takes each burst as it queued. The figure is
this process's CPU (user and system) per release, nothing else running in it; Redis is this
machine's (REDIS_URL, database 15 by default), with nobody subscribed.
"""

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from channel_layer import EVENT  # noqa: E402

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")


def main() -> None:
    options = parse_args()
    os.environ.update(DJANGO_SETTINGS_MODULE="research.settings", REDIS_URL=REDIS_URL)
    import django

    django.setup()
    print(f"{options.bursts} bursts of {options.per_burst} releases over {options.trees} trees")
    print("| path | CPU ms per release | wall ms per burst |\n| --- | --- | --- |")
    for _ in range(options.rounds):
        for name, measure in (("group_send", group_sends), ("publisher", published)):
            cpu, wall = measure(options)
            total = options.bursts * options.per_burst
            print(f"| {name} | {cpu * 1000 / total:.3f} | {wall * 1000 / options.bursts:.2f} |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", type=int, default=33)
    parser.add_argument("--bursts", type=int, default=400)
    parser.add_argument("--per-burst", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


def bursts(options) -> list[list[tuple[int, list[dict]]]]:
    releases = []
    for burst in range(options.bursts):
        first = burst * options.per_burst
        releases.append(
            [
                (1 + (first + n) % options.trees, [{**EVENT, "seq": first + n}])
                for n in range(options.per_burst)
            ]
        )
    return releases


def group_sends(options) -> tuple[float, float]:
    from channels.layers import get_channel_layer

    from frontend.delivery import _message, group_name

    async def run() -> tuple[float, float]:
        layer = get_channel_layer()
        await layer.group_send(group_name(0), _message([EVENT]))  # connected before timing
        cpu, wall = time.process_time(), time.perf_counter()
        for burst in bursts(options):
            lines: dict[int, list] = {}
            for root_id, payloads in burst:
                lines.setdefault(root_id, []).append(payloads)

            async def line(root_id: int, releases: list) -> None:
                for payloads in releases:
                    await layer.group_send(group_name(root_id), _message(payloads))

            await asyncio.gather(*(line(root_id, rel) for root_id, rel in lines.items()))
        return time.process_time() - cpu, time.perf_counter() - wall

    return asyncio.run(run())


def published(options) -> tuple[float, float]:
    from frontend.delivery import RESEND_SECONDS, _envelope
    from frontend.publisher import RedisPublisher

    publisher = RedisPublisher(_envelope, resend_seconds=RESEND_SECONDS)
    publisher.put(0, [EVENT])
    publisher.flush(5)  # connected before timing
    cpu, wall = time.process_time(), time.perf_counter()
    for burst in bursts(options):
        for root_id, payloads in burst:
            publisher.put(root_id, payloads)
        publisher.flush(5)
    return time.process_time() - cpu, time.perf_counter() - wall


if __name__ == "__main__":
    main()
