"""What one database round trip costs a thread while other threads of its process run Python:
the GIL's convoy, which the writer's statements meet when twenty trees start at once.

    .venv/bin/python bench/convoy.py                     # PostgreSQL, 0 to 4 busy threads
    .venv/bin/python bench/convoy.py --database sqlite

A thread sends `SELECT 1` 200 times, one after another, while 0, 1, 2 or 4 other threads
run a pure Python loop. A round trip releases the GIL while it waits on the socket; to go on,
the thread needs it back, and a thread running Python gives it up only when the switch
interval (`sys.setswitchinterval`, 5 ms by default) has passed since the waiter asked. It
prints the round trip's wall time (p50 and p90) for each count of busy threads, at the
default interval and at 1 ms. On SQLite there is no socket: a statement keeps the GIL for
most of its time, and the figures show what little it gives up. Round thirty-seven of
issue 25 (docs/performance.md).
"""

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from step_cost import django_in_process  # noqa: E402

ROUND_TRIPS = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="postgres")
    options = parser.parse_args()
    with django_in_process(options.database):
        print("| switch interval | threads running Python | round trip p50 | p90 |")
        print("| --- | --- | --- | --- |")
        for interval in (0.005, 0.001):
            sys.setswitchinterval(interval)
            for busy in (0, 1, 2, 4):
                walls = round_trips(busy)
                print(
                    f"| {interval * 1000:.0f} ms | {busy} | {statistics.median(walls):.2f} ms | "
                    f"{walls[int(len(walls) * 0.9)]:.2f} ms |",
                    flush=True,
                )


def round_trips(busy: int) -> list[float]:
    """The sorted wall times (ms) of ROUND_TRIPS statements while `busy` threads spin."""
    from django.db import connection

    stop = threading.Event()
    spinners = [threading.Thread(target=spin, args=(stop,)) for _ in range(busy)]
    for spinner in spinners:
        spinner.start()
    walls = []
    try:
        with connection.cursor() as cursor:
            for _ in range(ROUND_TRIPS):
                began = time.perf_counter()
                cursor.execute("SELECT 1")
                cursor.fetchone()
                walls.append((time.perf_counter() - began) * 1000)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    return sorted(walls)


def spin(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for number in range(1000):
            total += number


if __name__ == "__main__":
    main()
