"""What starting a research costs the web process: one `POST /v1/gb/research`, as an API client
sends it, up to its answer.

    .venv/bin/python bench/start_cost.py                      # PostgreSQL, 200 starts, 5 rounds
    .venv/bin/python bench/start_cost.py --database sqlite
    .venv/bin/python bench/start_cost.py --statements         # the statements of one start
    .venv/bin/python bench/start_cost.py --profile            # where 200 starts spend, by function

Every research pays this once, on its critical path: the root cannot be claimed before the
start commits (bench/tree_timeline.py's "root start, of which to its claim"). This runs the
request through Django's handler in this process (DRF's test client, a token, no socket):
authentication, the throttle's count, the checks, the working-roots limit, the rows and the
`run.created` event, the answer's serialisation. No agent pool runs, so nothing claims the
roots; each is marked done after its start, so the owner's working limit is never reached.
It prints the calling thread's CPU (`time.thread_time`) and the wall time per start, the
median of the rounds, and the statements of one start.
"""

import argparse
import cProfile
import statistics
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from step_cost import (  # noqa: E402
    django_in_process,
    medians_by_round,
    print_profile,
    statements_of,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--starts", type=int, default=200, help="starts per round (200)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--statements", action="store_true", help="list one start's statements")
    parser.add_argument("--profile", action="store_true", help="cProfile 200 starts")
    options = parser.parse_args()
    # The throttle still counts every start (a cache round trip); it never refuses one.
    with django_in_process(options.database, THROTTLE_RESEARCH_START="1000000/min"):
        measure(options)


def measure(options: argparse.Namespace) -> None:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from research.models import Run, Status

    owner = User.objects.create(username=f"bench-start-{time.time()}")
    client = APIClient(SERVER_NAME="localhost")
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=owner).key}")

    def start() -> int:
        response = client.post(
            "/v1/gb/research", {"topic": f"start {time.time()}", "max_steps": 10}, format="json"
        )
        if response.status_code != 201:
            raise SystemExit(f"the start answered {response.status_code}: {response.content!r}")
        return response.json()["id"]

    def started() -> tuple[float, float]:
        """CPU and wall milliseconds of one start (the bench's own update left out)."""
        cpu, wall = time.thread_time(), time.perf_counter()
        run_id = start()
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        Run.objects.filter(pk=run_id).update(status=Status.DONE)
        return cpu * 1000, wall * 1000

    rounds = medians_by_round(started, rounds=options.rounds, per_round=options.starts)
    statements = statements_of(start)
    print(
        f"one research started through the API ({options.database}, median of {options.rounds} "
        f"rounds of {options.starts}): CPU {statistics.median(r[0] for r in rounds):.2f} ms, "
        f"wall {statistics.median(r[1] for r in rounds):.2f} ms, "
        f"{len(statements)} statements"
    )
    if options.statements:
        print("\n".join(f"   {sql}" for sql in statements))
    if options.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [started() for _ in range(200)])
        print_profile(profile)


if __name__ == "__main__":
    main()
