"""What taking a connection out of the PostgreSQL pool costs, by the check the pool runs.

    .venv/bin/python bench/pool_checkout.py     # 2000 checkouts per check, 5 rounds

An agent thread gives its connection back whenever it waits (a model call, its children, a
tool thread's end) and takes one again after: a research does that thousands of times. This
times `getconn` + `putconn` on an idle pool of one connection, as the agents do it, with
psycopg_pool's own check (an empty query, one round trip: Django's `CONN_HEALTH_CHECKS`),
Canopy's (`research.postgresql.checks`: the socket asked first, no round trip), and none.
The figures are the calling thread's CPU (`time.thread_time`) and the wall time per
checkout, the median of the rounds.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from psycopg_pool import ConnectionPool  # noqa: E402

from research.postgresql.checks import IdleConnectionCheck  # noqa: E402

CHECKS = {
    "psycopg_pool's round trip": ConnectionPool.check_connection,
    "canopy's socket check": IdleConnectionCheck(),
    "no check": None,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkouts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--conninfo",
        default=os.environ.get("BENCH_CONNINFO", "host=127.0.0.1 user=postgres dbname=postgres"),
    )
    options = parser.parse_args()
    print(f"one checkout (getconn + putconn), median of {options.rounds} x {options.checkouts}:")
    for name, check in CHECKS.items():
        cpu, wall = measure(options, check)
        print(f"  {name:28} CPU {cpu * 1000:6.1f} µs   wall {wall * 1000:6.1f} µs")


def measure(options: argparse.Namespace, check) -> tuple[float, float]:
    with ConnectionPool(
        options.conninfo, min_size=1, max_size=1, check=check, kwargs={"autocommit": True}
    ) as pool:
        pool.wait()
        cpu_rounds, wall_rounds = [], []
        for _ in range(options.rounds):
            cpu, wall = time.thread_time(), time.perf_counter()
            for _ in range(options.checkouts):
                pool.putconn(pool.getconn())
            cpu_rounds.append((time.thread_time() - cpu) * 1000 / options.checkouts)
            wall_rounds.append((time.perf_counter() - wall) * 1000 / options.checkouts)
    return statistics.median(cpu_rounds), statistics.median(wall_rounds)


if __name__ == "__main__":
    main()
