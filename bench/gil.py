"""How many of the web process's threads are awake while many agents work, and what it costs.

    .venv/bin/python bench/gil.py                       # 120 and 200 agents at 200 ms a call
    .venv/bin/python bench/gil.py --slots 2 4 --agents 120

The trees of bench/served.py (a root and 5 children, 9 model calls on the critical path)
start at once in daphne with the agents in its process (in-memory channel layer), the
scripted model answering after 200 ms. Meanwhile this process reads /proc every 20 ms
(`--sample-ms`): how many of daphne's threads are runnable (state R: running or waiting for
a core, most of them for the GIL), and, over the whole run, the CPU and the context switches
of the process per model call. Beside them, the rest of the machine per model call: the
PostgreSQL processes, this process (the scripted model, the viewers, the sampling), all of
it, and how many of the two cores were busy on average; and the p99 of the events' delay
to the viewers' sockets, from their commit (bench/commit_settings.py) and from the stamp
they carry, set before it. `--slots` sets
RESEARCH_AGENT_CPU_SLOTS, the gate on agents running Python at once (default 2 per core).
`--threads` splits the CPU per model call by thread role, as
`research_cpu.py --threads` does (daphne on bench/thread_settings.py). `--gc` prints the
cyclic garbage collector's pauses in daphne during each load, by generation, and `--gc-off`
runs daphne with the collector off after startup (both on bench/gc_settings.py); with
either of those, or `--threads`, the delay from the commit is not noted ("n/a").
`--py-spy FILE` samples daphne through the loads, not its start or warm tree (py-spy on the
`PATH`, `--gil --nonblocking` at 100 Hz, which leaves the loads' figures within their
noise); `bench/owners.py FILE` splits the samples by whose code ran (round forty).
"""

import argparse
import asyncio
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

import research_cpu  # noqa: E402
import served  # noqa: E402
from served import CHILDREN, CRITICAL_PATH_CALLS, Client, Server, many_trees  # noqa: E402

from agents.llm.scripted import ScriptedLLM  # noqa: E402

DATABASE = os.environ.get("BENCH_GIL_DATABASE", "canopy_bench_gil")
DELAY = 0.2


def main() -> None:
    options = parse_args()
    served.prepare(DATABASE, options)
    if options.threads:
        research_cpu.log_threads()
    elif options.gc or options.gc_off:
        research_cpu.daphne_settings(
            "gc_settings", CANOPY_GC_LOG=str(GC_LOG), CANOPY_GC="off" if options.gc_off else "on"
        )
    print("| agents | CPU slots | ratio to ideal | runnable threads p50 / p95 / max | "
          "CPU ms per model call | context switches per model call | "
          "machine CPU ms per call: PostgreSQL / this process / all | cores busy | "
          "events p99 from commit / from stamp |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with ScriptedLLM(keep_alive=True) as llm:
        for slots in options.slots:
            os.environ["RESEARCH_AGENT_CPU_SLOTS"] = str(slots)
            with Server(llm, layer="memory", commits=True) as server:
                client = Client(server, "bench")
                asyncio.run(many_trees(llm, client, server, 1, 0.0, "warm"))
                # 100 Hz: stopping the process for each sample (py-spy's default) or 250 Hz
                # took a 120-agent load from about 80% to 33 to 46% of the ideal (round forty).
                sampling = None
                if options.py_spy:
                    sampling = research_cpu.py_spy(server.process.pid, options.py_spy, rate=100)
                for agents in options.agents:
                    row = measure(llm, client, server, agents, options)
                    print(
                        f"| {row['agents']} | {slots} | {row['ratio']:.0%} | "
                        f"{row['runnable'][0]} / {row['runnable'][1]} / {row['runnable'][2]} | "
                        f"{row['cpu_ms']:.1f} | {row['switches']:.1f} | "
                        f"{row['postgres_ms']:.2f} / {row['bench_ms']:.2f} / "
                        f"{row['machine_ms']:.2f} | "
                        f"{row['cores_busy']:.2f} | {row['events']} |",
                        flush=True,
                    )
                    if options.threads:
                        print_roles(row["roles"])
                    if options.gc or options.gc_off:
                        print_pauses(row["pauses"])
                if sampling:
                    sampling.send_signal(signal.SIGINT)  # py-spy writes its record and exits
                    sampling.wait(30)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="*", default=[120, 200])
    parser.add_argument("--slots", type=int, nargs="*", default=[2 * (os.cpu_count() or 1)])
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--threads", action="store_true", help="CPU per model call by thread role")
    choice.add_argument("--gc", action="store_true", help="the garbage collector's pauses a load")
    choice.add_argument("--gc-off", action="store_true", help="daphne's collector off, a load")
    parser.add_argument(
        "--sample-ms", type=float, default=20, help="how often the runnable threads are counted"
    )
    parser.add_argument(
        "--py-spy", metavar="FILE", help="sample daphne through the loads (py-spy, raw format)"
    )
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    return parser.parse_args()


class Sampler(threading.Thread):
    """Counts the runnable threads of a process every `every` seconds, and every tenth time
    the context switches of each thread (the last count seen of each, so threads that end
    count too). Reading the /proc files of 200 threads costs this process about a millisecond:
    every 5 ms (rounds six to twenty-four) it took half a core of this two-core machine from
    the load it measured, so it counts every 20 ms by default."""

    def __init__(self, pid: int, every: float):
        super().__init__(daemon=True)
        self.pid = pid
        self.every = every
        self.samples: list[int] = []
        self.stopped = threading.Event()
        self.before = thread_switches(pid)
        self.seen: dict[str, int] = dict(self.before)

    def run(self) -> None:
        tasks = Path(f"/proc/{self.pid}/task")
        tick = 0
        while not self.stopped.wait(self.every):
            running = 0
            for task in tasks.iterdir():
                try:
                    stat = (task / "stat").read_text()
                except OSError:
                    continue  # the thread ended meanwhile
                running += stat.rsplit(")", 1)[1].split()[0] == "R"
            self.samples.append(running)
            tick += 1
            if tick % 10 == 0:
                self.seen.update(thread_switches(self.pid))

    def switches(self) -> int:
        self.seen.update(thread_switches(self.pid))
        return sum(count - self.before.get(tid, 0) for tid, count in self.seen.items())


def thread_switches(pid: int) -> dict[str, int]:
    """Context switches (voluntary and not) of each thread of the process so far."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue
        counts[task.name] = sum(
            int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line
        )
    return counts


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_seconds() -> float:
    """The CPU of this machine's PostgreSQL processes so far (those alive now)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    total += cpu_seconds(int(entry.name))
            except OSError:
                continue  # it ended meanwhile
    return total


def machine_seconds() -> tuple[float, float]:
    """The machine's CPU time so far: (busy, all), over every core, from /proc/stat."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - fields[3] - fields[4]) / tick, sum(fields) / tick


def measure(llm: ScriptedLLM, client: Client, server: Server, agents: int, options) -> dict:
    threads = options.threads
    pid = server.process.pid
    roles_before = research_cpu.thread_sums(pid) if threads else None
    noting = options.gc or options.gc_off
    collections_before = len(collections(pid)) if noting else 0
    trees = agents // (CHILDREN + 1)
    calls_before = len(llm.requests)
    cpu_before = cpu_seconds(pid)
    others_before = postgres_seconds(), time.process_time(), machine_seconds()
    sampler = Sampler(pid, options.sample_ms / 1000)
    sampler.start()
    figures = asyncio.run(many_trees(llm, client, server, trees, DELAY, "gil"))
    sampler.stopped.set()
    sampler.join()
    cpu_after = cpu_seconds(pid)
    postgres, bench = postgres_seconds() - others_before[0], time.process_time() - others_before[1]
    busy = machine_seconds()[0] - others_before[2][0]
    wall = machine_seconds()[1] - others_before[2][1]  # all cores' time that passed
    calls = len(llm.requests) - calls_before
    roles = {}
    if threads:
        change = research_cpu.thread_change(roles_before, research_cpu.thread_sums(pid))
        roles = {
            name: (seconds * 1000 / calls, change["switches"].get(name, 0) / calls)
            for name, seconds in change["cpu"].items()
        }
    pauses = collections(pid)[collections_before:] if noting else []
    ordered = sorted(sampler.samples) or [0]
    return {
        "agents": trees * (CHILDREN + 1),
        "ratio": CRITICAL_PATH_CALLS * DELAY / figures["wall"],
        "runnable": (
            int(statistics.median(ordered)),
            ordered[int(0.95 * (len(ordered) - 1))],
            ordered[-1],
        ),
        "cpu_ms": (cpu_after - cpu_before) * 1000 / calls,
        "switches": sampler.switches() / calls,
        # The whole machine: the database, this process (the scripted model, the viewers,
        # the sampler) and all of it, and how many of its cores were busy on average.
        "postgres_ms": postgres * 1000 / calls,
        "bench_ms": bench * 1000 / calls,
        "machine_ms": busy * 1000 / calls,
        "cores_busy": busy / wall * (os.cpu_count() or 1),
        "events": " / ".join(
            f"{figures[name]['p99'] * 1000:.0f} ms" if figures[name].get("n") else "n/a"
            for name in ("commit_latency", "latency")
        ),
        "roles": roles,
        "pauses": pauses,
    }


GC_LOG = Path(f"/tmp/canopy-bench-gc-{os.getpid()}.json")


def collections(pid: int) -> list[tuple[int, float, float]]:
    """daphne's garbage collections so far (bench/gc_settings.py): (generation, wall ms,
    CPU ms) each."""
    return research_cpu.asked(pid, GC_LOG, "gc_settings")


def print_pauses(pauses: list) -> None:
    """A load's collections by generation: how many, their pauses' sum and the longest."""
    for generation in (0, 1, 2):
        walls = [wall for noted, wall, _cpu in pauses if noted == generation]
        if walls:
            print(
                f"    generation {generation}: {len(walls)} collections, "
                f"{sum(walls):.0f} ms in all, the longest {max(walls):.1f} ms"
            )
    if not pauses:
        print("    no collection")


def print_roles(roles: dict[str, tuple[float, float]]) -> None:
    """CPU ms and context switches per model call, by thread role, largest first."""
    for name, (cpu_ms, switched) in sorted(roles.items(), key=lambda item: -item[1][0]):
        if cpu_ms >= 0.01:
            print(f"    {cpu_ms:5.2f} ms  {switched:5.1f} switches  {name}")


if __name__ == "__main__":
    main()
