"""Canopy's CPU per model call for a whole default research, measured on the web process.

    .venv/bin/python bench/research_cpu.py              # 5 researches measured (make bench)
    .venv/bin/python bench/research_cpu.py --repeat 10
    .venv/bin/python bench/research_cpu.py --statements   # SQL statements and commits instead
    .venv/bin/python bench/research_cpu.py --threads      # the CPU split by thread role

A research of the demo's shape: a root spawns 4 sub-agents in one turn, waits and writes its
draft; three sub-agents each search the web once and read two pages, one lists its siblings
and messages one; the verifier Canopy starts checks the draft in one call. 5 agents and the
verifier, 16 model calls, 3 searches, 6 page reads. daphne serves the app on
PostgreSQL with the agents in its process and the in-memory channel layer; the scripted model
(latency 0 ms), the SearXNG-style search and the pages (tests/fakeweb.py) run in this process,
so the CPU counted, the web process's user + system time from /proc, is Canopy's alone. The
research is started through the REST API and followed on its websocket, as the page does.

With --statements, daphne runs with bench/statement_settings.py: every statement of every
thread's connection, and every commit, goes to a log, and this prints the statements and
transactions per research and the statement shapes most run (the CPU figures of that run
include the log's own cost, so they are not comparable with a run without it).

With --threads, daphne runs with bench/thread_settings.py, and this prints the CPU of a
research by thread role (agents, daphne's loop, the writer, ...): each thread's own clock.

To compare two versions, alternate short runs of each (bench/alternate.py): on a shared
machine the same code drifts by 15% or more within minutes.
"""

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from collections import Counter  # noqa: E402

from served import Client, Server, watch  # noqa: E402

from agents.llm.scripted import ScriptedLLM, call, calls, reply, slow  # noqa: E402
from tests.fakeweb import FakeWeb  # noqa: E402

DATABASE = os.environ.get("BENCH_CPU_DATABASE", "canopy_bench_cpu")
SECRET_KEY = "bench-only-secret-key-not-for-anything-else-0123456789"
FACETS = ("history", "chemistry", "economics")
IDLE_SECONDS = 5.0  # the idle process, measured after the researches


def main() -> None:
    options = parse_args()
    with ScriptedLLM(keep_alive=True) as llm, FakeWeb() as web:
        environment(web)
        import django

        django.setup()
        fresh_database()
        if options.statements and options.threads:
            raise SystemExit("--statements and --threads each need their own run")
        if options.statements:
            log_statements()
        if options.threads:
            log_threads()
        with Server(llm, layer="memory") as server:
            figures = measure(llm, server, options)
    report(figures)
    if options.statements:
        report_statements(figures, top=options.top)
    if options.threads:
        report_threads(figures)
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=2))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="researches measured (5)")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument(
        "--py-spy", metavar="FILE", help="sample the web process meanwhile (py-spy, raw format)"
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="count the web process's SQL statements and commits per research",
    )
    parser.add_argument("--top", type=int, default=30, help="statement shapes listed (30)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        choices=range(1, 7),
        metavar="1-6",
        help="searches and reads of each researching sub-agent (1: the default research); "
        "more rounds give the agents more calls each, as a real research does",
    )
    parser.add_argument(
        "--delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the model answers each call after this long (0): with a delay the agents "
        "contend less for the GIL, as with a real model",
    )
    parser.add_argument(
        "--threads",
        action="store_true",
        help="the web process's CPU per research by thread role (bench/thread_settings.py)",
    )
    return parser.parse_args()


def environment(web: FakeWeb) -> None:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="research.settings",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
        SECRET_KEY=SECRET_KEY,
        RESEARCH_AGENTS_IN_WEB="false",  # this process runs no agents; daphne does
        OPENAI_API_KEY="bench",
        RESEARCH_MODEL="scripted",
        RESEARCH_MODEL_PRICES='{"scripted": [1.0, 2.0]}',
        SEARCH_PROVIDER="searxng",
        SEARXNG_URL=web.url,
        READ_PAGE_ALLOWED_HOSTS=web.host,
    )
    os.environ.pop("REDIS_URL", None)


def fresh_database() -> None:
    import psycopg
    from django.core.management import call_command

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        db.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        db.execute(f"CREATE DATABASE {DATABASE}")
    call_command("migrate", verbosity=0)


def script_research(
    llm: ScriptedLLM, web: str, topic: str, rounds: int = 1, delay: float = 0.0
) -> None:
    """The default research; with `rounds`, each researching sub-agent searches and reads that
    many times before its report (2 model calls a round); each answer after `delay` seconds."""
    if delay:
        llm = _Delayed(llm, delay)
    tasks = [f"{topic}: the {facet} side, with sources" for facet in FACETS]
    tasks.append(f"{topic}: ask the others what they found")
    budget = {"max_steps": 2 * rounds + 2} if rounds > 1 else {}
    spawns = [
        call(
            "spawn_subagent",
            name=f"part{index}",
            reason="one part of the topic",
            task=task,
            **budget,
        )
        for index, task in enumerate(tasks)
    ]
    llm.script(topic, calls(*spawns), call("wait_subagents"), reply("the research's report"))
    for facet, task in zip(FACETS, tasks, strict=False):
        research = [
            step
            for round_ in range(rounds)
            for step in (
                call("web_search", query=f"otter {facet} {round_}"),
                calls(
                    call("read_page", url=f"{web}/article"),
                    call("read_page", url=f"{web}/notes.txt"),
                ),
            )
        ]
        llm.script(task, *research, reply(f"the {facet} report"))
    llm.script(
        tasks[-1],
        call("list_siblings"),
        call("send_message", to="part0", text="what did the history side find?"),
        reply("the messenger's report"),
    )
    # The root's draft goes to a verifier (RESEARCH_VERIFY_REPORTS), as in every research.
    llm.script("# Draft\n\nthe research's report", reply("Every claim is supported."))


class _Delayed:
    """Scripts every turn given to `llm` to come after `delay` seconds."""

    def __init__(self, llm: ScriptedLLM, delay: float) -> None:
        self.llm, self.delay = llm, delay

    def script(self, match: str, *turns) -> None:
        self.llm.script(match, *[slow(self.delay, turn) for turn in turns])


STATEMENT_LOG = Path(f"/tmp/canopy-bench-statements-{os.getpid()}.log")


def log_statements() -> None:
    """daphne (started after this) logs its statements: see bench/statement_settings.py."""
    STATEMENT_LOG.write_text("")
    daphne_settings("statement_settings", CANOPY_STATEMENT_LOG=str(STATEMENT_LOG))


def daphne_settings(module: str, **variables: str) -> None:
    """daphne (started after this) runs on bench/<module>.py, told `variables`."""
    os.environ.update(variables, DJANGO_SETTINGS_MODULE=module)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(PROJECT / "bench"), str(PROJECT), os.environ.get("PYTHONPATH", "")]
    )


THREAD_LOG = Path(f"/tmp/canopy-bench-threads-{os.getpid()}.json")


def log_threads() -> None:
    """daphne (started after this) sums its threads' CPU by role: bench/thread_settings.py."""
    daphne_settings("thread_settings", CANOPY_THREAD_CPU_LOG=str(THREAD_LOG))


def thread_sums(pid: int) -> dict[str, float]:
    """The web process's CPU seconds and context switches so far by thread role
    ({"cpu": ..., "switches": ...})."""
    return asked(pid, THREAD_LOG, "thread_settings")


def asked(pid: int, log: Path, settings: str):
    """What daphne on bench/<settings>.py writes to `log` when sent SIGUSR1, as JSON."""
    log.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not log.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the web process wrote nothing to {log} (is it on {settings}?)")
        time.sleep(0.01)
    return json.loads(log.read_text())


def thread_change(before: dict, after: dict) -> dict[str, dict[str, float]]:
    """What each thread role spent between two `thread_sums`: {"cpu": ..., "switches": ...}."""
    return {
        kind: {name: value - before[kind].get(name, 0) for name, value in sums.items()}
        for kind, sums in after.items()
    }


def statement_lines() -> list[str]:
    if not STATEMENT_LOG.exists():
        return []
    return STATEMENT_LOG.read_text().splitlines()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far, all its threads."""
    return sum(cpu_split(pid))


def py_spy(pid: int, record: str, *, rate: int) -> subprocess.Popen:
    """py-spy sampling the process's thread that holds the GIL into `record` (raw format,
    for bench/owners.py), `rate` times a second without stopping the process for each
    sample, until it is sent SIGINT. Returns once py-spy has attached."""
    sampler = subprocess.Popen(
        ["py-spy", "record", "--pid", str(pid), "--rate", str(rate), "--gil", "--nonblocking"]
        + ["--format", "raw", "--output", record],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(1)
    return sampler


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system (the kernel's, for the process: sockets, thread wake-ups) CPU so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def measure(llm: ScriptedLLM, server: Server, options: argparse.Namespace) -> dict:
    client = Client(server, "bench")
    web = os.environ["SEARXNG_URL"]
    pid = server.process.pid
    runs = []
    sampler = None
    for index in range(options.repeat + 1):  # the first warms the process up and is dropped
        if index == 1 and options.py_spy:
            sampler = py_spy(pid, options.py_spy, rate=1000)
        topic = f"research cpu {index} {time.time()}"
        script_research(llm, web, topic, options.rounds, options.delay)
        calls_before = len(llm.requests)
        lines_before = len(statement_lines())
        threads_before = thread_sums(pid) if options.threads else {}
        (user, system), started = cpu_split(pid), time.monotonic()
        status = asyncio.run(one_research(client, topic))
        wall = time.monotonic() - started
        user_after, system_after = cpu_split(pid)
        cpu = user_after - user + system_after - system
        if options.statements:
            time.sleep(0.5)  # the last agent's and the pool's own statements after the end
            lines = statement_lines()[lines_before:]
        else:
            lines = []
        model_calls = len(llm.requests) - calls_before
        if status != "done" or llm.unscripted:
            raise SystemExit(f"the research ended {status}; unscripted: {llm.unscripted}")
        run = {
            "cpu_s": cpu,
            "system_s": system_after - system,
            "wall_s": wall,
            "model_calls": model_calls,
        }
        if options.threads:
            time.sleep(0.5)  # the last agent's end and the pushes after it
            after = thread_sums(pid)
            change = thread_change(threads_before, after)
            run["threads"], run["switches"] = change["cpu"], change["switches"]
        if options.statements:
            run["statements"] = sum(line != "-- commit" for line in lines)
            run["transactions"] = sum(line == "-- commit" for line in lines)
            run["shapes"] = Counter(line for line in lines if line != "-- commit")
        runs.append(run)
    measured = runs[1:]
    if sampler is not None:
        sampler.send_signal(signal.SIGINT)
        sampler.wait(30)
    time.sleep(1)  # the last research's pushes and its agents' ends
    idle_before, idle_lines = cpu_seconds(pid), len(statement_lines())
    idle_threads = thread_sums(pid) if options.threads else {}
    time.sleep(IDLE_SECONDS)
    idle_per_second = (cpu_seconds(pid) - idle_before) / IDLE_SECONDS
    idle_statements = (len(statement_lines()) - idle_lines) / IDLE_SECONDS
    if options.threads:
        after = thread_sums(pid)["cpu"]
        idle_threads = {
            name: (seconds - idle_threads["cpu"].get(name, 0.0)) / IDLE_SECONDS
            for name, seconds in after.items()
        }
    cpu = statistics.median(run["cpu_s"] for run in measured)
    model_calls = measured[0]["model_calls"]
    return {
        "researches": len(measured),
        "model_calls": model_calls,
        "rounds": options.rounds,
        "delay_ms": options.delay * 1000,
        "cpu_s_per_research": cpu,
        "cpu_ms_per_model_call": cpu * 1000 / model_calls,
        # Of all the researches' CPU, the kernel's share (a median of a 10 ms tick is coarse).
        "system_share": sum(run["system_s"] for run in measured)
        / max(sum(run["cpu_s"] for run in measured), 1e-9),
        "cpu_ms_per_model_call_mean": statistics.mean(run["cpu_s"] for run in measured)
        * 1000
        / model_calls,
        "wall_s_per_research": statistics.median(run["wall_s"] for run in measured),
        "first_research_cpu_s": runs[0]["cpu_s"],
        "idle_cpu_ms_per_second": idle_per_second * 1000,
        "idle_log_lines_per_second": idle_statements,
        "idle_threads_cpu_s_per_second": idle_threads,
        "runs": runs,
    }


async def one_research(client: Client, topic: str) -> str:
    async with client.api() as api:
        response = await api.post("/research", json={"topic": topic, "max_steps": 10})
        response.raise_for_status()
        root_id = response.json()["id"]
        await asyncio.wait_for(watch(client, root_id, []), 120)
        return (await api.get(f"/research/{root_id}")).json()["status"]


def report(figures: dict) -> None:
    print(
        f"one research (5 agents + verifier, {figures['model_calls']} model calls, "
        f"{3 * figures['rounds']} searches, {6 * figures['rounds']} page reads), agents in the "
        f"web process, model at {figures['delay_ms']:g} ms, "
        f"median of {figures['researches']}:"
    )
    print(
        f"canopy CPU per research: {figures['cpu_s_per_research']:.3f} s; "
        f"per model call: {figures['cpu_ms_per_model_call']:.1f} ms  (goal <= 5); "
        f"mean {figures['cpu_ms_per_model_call_mean']:.1f} ms; "
        f"the kernel's share {figures['system_share']:.0%}"
    )
    print(
        f"wall per research: {figures['wall_s_per_research']:.2f} s; first research after "
        f"start: {figures['first_research_cpu_s']:.2f} s of CPU; idle process: "
        f"{figures['idle_cpu_ms_per_second']:.1f} ms of CPU a second"
    )


def report_threads(figures: dict) -> None:
    measured = figures["runs"][1:]
    roles = {name for run in measured for name in run["threads"]}
    medians = {
        name: statistics.median(run["threads"].get(name, 0.0) for run in measured) for name in roles
    }
    total = sum(medians.values())
    switched = {
        name: statistics.median(run["switches"].get(name, 0) for run in measured) for name in roles
    }
    print(
        f"CPU and context switches per research by thread (median of {len(measured)}, "
        f"bench/thread_settings.py; all threads: {sum(switched.values()):.0f} switches):"
    )
    for name, seconds in sorted(medians.items(), key=lambda item: -item[1]):
        if seconds * 1000 >= 0.5:
            print(
                f"  {seconds * 1000:6.1f} ms  {seconds / total:4.0%}  "
                f"{switched.get(name, 0):6.0f} switches  {name}"
            )
    idle = figures["idle_threads_cpu_s_per_second"]
    print(
        f"the idle process's CPU a second by thread, over {IDLE_SECONDS:g} s "
        f"(all threads: {sum(idle.values()) * 1000:.2f} ms):"
    )
    for name, seconds in sorted(idle.items(), key=lambda item: -item[1]):
        if seconds * 1000 >= 0.05:
            print(f"  {seconds * 1000:6.2f} ms  {name}")


def report_statements(figures: dict, *, top: int) -> None:
    measured = figures["runs"][1:]
    statements = statistics.median(run["statements"] for run in measured)
    transactions = statistics.median(run["transactions"] for run in measured)
    calls = figures["model_calls"]
    print(
        f"statements per research: {statements:.0f} ({statements / calls:.1f} per model call); "
        f"transactions per research: {transactions:.0f} ({transactions / calls:.1f} per call); "
        f"median of {len(measured)}"
    )
    print(
        "idle process (the pool's claim poll, heartbeats): "
        f"{figures['idle_log_lines_per_second']:.1f} log lines a second"
    )
    shapes: Counter[str] = Counter()
    for run in measured:
        shapes.update(run["shapes"])
    print(f"statement shapes per research, most run first (top {top}):")
    for sql, count in shapes.most_common(top):
        print(f"{count / len(measured):6.1f}  {sql[:150]}")
    for run in figures["runs"]:
        run["shapes"] = dict(run.get("shapes", {}))


if __name__ == "__main__":
    main()
