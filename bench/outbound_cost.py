"""CPU time per outbound request: read_page's fetch and a SearXNG web search, N calls each
against tests/fakeweb.py on 127.0.0.1, in one thread (no database: the fetch and the search
only, not the Source rows the tools write).

    .venv/bin/python bench/outbound_cost.py --calls 200

Prints, per kind of call: CPU milliseconds per call (process time, all threads) and wall
milliseconds per call. A fresh client per call pays a new SSL context and connection pool
each time; a pooled client per purpose pays them once per process.
"""

import argparse
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    options = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "research.settings")
    import django

    django.setup()
    from django.conf import settings

    from agents.tools import pages, web
    from tests.fakeweb import FakeWeb

    ctx = SimpleNamespace(cancel=SimpleNamespace(check=lambda: None))
    with FakeWeb() as fake:
        settings.READ_PAGE_ALLOWED_HOSTS = [fake.host]
        settings.SEARXNG_URL = fake.url
        url = f"{fake.url}/article"
        measure("read_page fetch", options.calls, lambda: pages.fetch(ctx, pages.parse_url(url)))
        measure("web_search searxng", options.calls, lambda: web.search_searxng("otter", 5))


def measure(what: str, calls: int, call) -> None:
    call()  # the first call pays the imports
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        call()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    cpu_ms, wall_ms = cpu / calls * 1000, wall / calls * 1000
    print(f"{what:20} {calls} calls: {cpu_ms:.2f} ms CPU, {wall_ms:.2f} ms wall per call")


if __name__ == "__main__":
    main()
