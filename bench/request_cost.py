"""The web process's CPU for one request of each kind a viewer makes, measured from outside.

    .venv/bin/python bench/request_cost.py              # 7 rounds of 300 of each kind
    .venv/bin/python bench/request_cost.py --threads    # and each kind's CPU by thread role

daphne serves the app on PostgreSQL (bench/served.py's Server, in-memory channel layer) with
one tree working, its root in a model call that lasts the whole measure. By turns, this
process makes `--count` requests of each kind, one after another:

- an API read (`GET /research/<id>`, token auth);
- a static file (`canopy.css`);
- the run page of that tree (session auth; the page's HTML only);
- a viewer's socket: the websocket's handshake, its snapshot, its close.

For each kind, daphne's user + system CPU (from /proc) divided by the requests; the median
over the rounds after the first. With `--threads`, daphne runs on bench/thread_settings.py and
each kind's CPU is also split by thread role (the server's loop, the request threads, the
pool threads of the socket's reads) with the context switches per request; those figures
carry the settings' own bookkeeping for every thread that ends.
"""

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

import research_cpu  # noqa: E402
import served  # noqa: E402
from served import Client, Server  # noqa: E402

from agents.llm.scripted import ScriptedLLM  # noqa: E402

DATABASE = os.environ.get("BENCH_REQUESTS_DATABASE", "canopy_bench_requests")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=300, help="requests of a kind a round")
    parser.add_argument("--threads", action="store_true", help="CPU by thread role too")
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    served.prepare(DATABASE, options)
    if options.threads:
        research_cpu.log_threads()
    with ScriptedLLM(keep_alive=True) as llm, Server(llm, layer="memory") as server:
        client = Client(server, "bench")
        root_id = asyncio.run(working_tree(llm, client))
        asyncio.run(measure(server, client, root_id, options))


async def working_tree(llm: ScriptedLLM, client: Client) -> int:
    """A tree whose root stays in its first model call through the measure."""
    topic = f"request cost {time.time()}"
    served.script_tree(llm, topic, 3600.0)
    async with client.api() as api:
        return await served.start_tree(api, topic)


async def measure(server: Server, client: Client, root_id: int, options) -> None:
    pid = server.process.pid
    async with client.api() as api, client.browser() as browser:

        async def socket() -> None:
            await served.open_socket(client, root_id)

        async def checked(request) -> None:
            (await request).raise_for_status()

        kinds = {
            "API read": lambda: checked(api.get(f"/research/{root_id}")),
            "static file": lambda: checked(browser.get("/static/canopy.css")),
            "run page": lambda: checked(browser.get(f"/runs/{root_id}/")),
            "socket and snapshot": socket,
        }
        figures: dict[str, list[float]] = {kind: [] for kind in kinds}
        roles: dict[str, list[dict]] = {kind: [] for kind in kinds}
        for _ in range(options.rounds):
            for kind, request in kinds.items():
                threads = research_cpu.thread_sums(pid) if options.threads else None
                before = cpu_seconds(pid)
                for _ in range(options.count):
                    await request()
                figures[kind].append((cpu_seconds(pid) - before) * 1000 / options.count)
                if threads is not None:
                    change = research_cpu.thread_change(threads, research_cpu.thread_sums(pid))
                    roles[kind].append(change)
    print(f"daphne's CPU per request (median of {options.rounds - 1} rounds of {options.count}):")
    print(
        "| request | CPU ms |"
        + (" by thread role: ms, context switches |" if options.threads else "")
    )
    print("| --- | --- |" + (" --- |" if options.threads else ""))
    for kind, values in figures.items():
        row = f"| {kind} | {statistics.median(values[1:]):.2f} |"
        if options.threads:
            row += f" {split(roles[kind][1:], options.count)} |"
        print(row)


def split(changes: list[dict], count: int) -> str:
    """Each role's median CPU (ms) and context switches per request."""
    names = {name for change in changes for name in change["cpu"]}
    parts = []
    for name in names:
        cpu = statistics.median(change["cpu"].get(name, 0) for change in changes) * 1000 / count
        switches = statistics.median(change["switches"].get(name, 0) for change in changes) / count
        if cpu >= 0.05:
            parts.append((cpu, f"{name} {cpu:.2f} / {switches:.0f}"))
    return ", ".join(text for _, text in sorted(parts, reverse=True))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
