"""Canopy served by daphne, measured from outside: trees, concurrency, event latency, pages.

    .venv/bin/python bench/served.py            # the whole table (make bench), 5-10 minutes
    .venv/bin/python bench/served.py --quick    # fewer and smaller rounds

A scripted OpenAI-compatible model in this process answers every call after a fixed delay;
daphne serves the app with the agents in its process, on PostgreSQL, with the in-memory
channel layer or Redis; this process drives it through the REST API and websockets, as a
browser and an API client would. Each figure is printed beside its ideal, measured in the
same run. `--json FILE` keeps the figures for bench/plots.py.

A tree is a root and 5 children: the root spawns them in one turn, waits, answers (3
turns); each child makes 6 cheap tool calls and answers (7 turns). Its critical path is 9
model calls: the ideal wall time of a tree, and of any number of trees run at once.
"""

import argparse
import asyncio
import base64
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from agents.llm.scripted import ScriptedLLM, call, calls, reply, slow  # noqa: E402

DATABASE = "canopy_bench_served"
DATABASE_URL = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
REDIS_URL = "redis://127.0.0.1:6379/14"
SECRET_KEY = "bench-only-secret-key-not-for-anything-else-0123456789"
CHILDREN = int(os.environ.get("BENCH_CHILDREN", "5"))  # 1 to 5 (bench/tree_timeline.py)
CRITICAL_PATH_CALLS = 9


def main() -> None:
    options = parse_args()
    environment(options)
    import django

    django.setup()
    fresh_database()
    results: dict = {"quick": options.quick}
    with ScriptedLLM(keep_alive=True) as llm:
        for layer in ("memory", "redis"):
            with Server(llm, layer=layer, commits=True) as server:
                results[layer] = measure_layer(llm, server, layer, options)
        with Server(llm, layer="redis", workers=2, commits=True) as server:
            results["workers"] = measure_workers(llm, server, options)
    results["lists"] = measure_lists(options)
    print_table(results)
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=2))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller rounds")
    parser.add_argument("--json", help="write the figures to this file")
    return parser.parse_args()


def environment(options: argparse.Namespace) -> None:
    os.environ.update(
        # A profiler's settings for daphne (and this process), on PYTHONPATH, when asked.
        DJANGO_SETTINGS_MODULE=os.environ.get("BENCH_SETTINGS", "research.settings"),
        DATABASE_URL=DATABASE_URL,
        SECRET_KEY=SECRET_KEY,
        RESEARCH_AGENTS_IN_WEB="false",  # this process runs no agents
        OPENAI_API_KEY="bench",
        RESEARCH_MODEL="scripted",
        RESEARCH_MODEL_PRICES='{"scripted": [1.0, 2.0]}',
        # Every tree is a research started through the API: the bench starts far more than
        # an analyst may in an hour.
        THROTTLE_RESEARCH_START="100000/hour",
    )
    os.environ.pop("REDIS_URL", None)


def prepare(database: str, options: argparse.Namespace) -> None:
    """Another bench on this one's server and trees: its own database, created afresh, and
    Django set up on it."""
    global DATABASE, DATABASE_URL
    DATABASE = database
    DATABASE_URL = f"postgres://postgres@127.0.0.1:5432/{database}"
    environment(options)
    import django

    django.setup()
    fresh_database()


def fresh_database() -> None:
    import psycopg
    from django.core.management import call_command

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        db.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        db.execute(f"CREATE DATABASE {DATABASE}")
    call_command("migrate", verbosity=0)


def quiet_collector() -> None:
    """Called before each measured load. This process plays the model and the browsers: a
    pause of its own must not count as Canopy's. With Django, httpx and websockets imported,
    and the scripts and figures of earlier loads, it holds 200,000 objects and more; a full
    collection of them took 170 to 190 ms in each 120-agent run of bench/gil.py, every model
    call and socket of this process waiting meanwhile. What is alive before a load is frozen
    (as Canopy's processes freeze their startup, research.ops.heap): a load then has no such
    pause."""
    gc.collect()
    gc.freeze()


# --- The server ------------------------------------------------------------------------------


class Server:
    """daphne on this machine's PostgreSQL, with the agents in its process when `llm` is
    given (the scripted model they call), without them otherwise."""

    def __init__(
        self,
        llm: ScriptedLLM | None = None,
        *,
        layer: str = "memory",
        workers: int = 0,
        commits: bool = False,
    ):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = agent_environment(llm, layer=layer)
        # With `commits`, when each tree's events were pushed after their commit (bench/
        # commit_settings.py), unless a profiler's settings were asked for.
        self.commit_log = Path(tempfile.gettempdir()) / f"canopy-bench-commits-{self.port}"
        settings = env.get("DJANGO_SETTINGS_MODULE", "research.settings")
        if commits and settings == "research.settings":
            paths = [str(PROJECT / "bench"), str(PROJECT), env.get("PYTHONPATH", "")]
            env.update(
                DJANGO_SETTINGS_MODULE="commit_settings",
                CANOPY_COMMIT_LOG=str(self.commit_log),
                PYTHONPATH=os.pathsep.join(filter(None, paths)),
            )
        self.noting_commits = env.get("DJANGO_SETTINGS_MODULE") == "commit_settings"
        # With workers, this process only serves and enqueues; they run the agents.
        env["RESEARCH_AGENTS_IN_WEB"] = "true" if llm is not None and not workers else "false"
        self.workers = [
            subprocess.Popen(
                [sys.executable, "manage.py", "runagents", "--max-agents", "400"],
                cwd=PROJECT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(workers)
        ]
        self.log_path = Path(tempfile.gettempdir()) / f"canopy-bench-{layer}-{self.port}.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
            + ["research.asgi:application"],
            cwd=PROJECT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def __enter__(self) -> "Server":
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/login/", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise SystemExit(f"daphne did not start: see {self.log_path}")

    def __exit__(self, *exc) -> None:
        for worker in self.workers:
            worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            worker.wait(30)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def commits(self) -> dict[int, list[tuple[int, int, float]]]:
        """Each tree's pushes since the last ask, by root id: (first number, how many, when
        the COMMIT before them was sent), from every process that commits events (daphne
        and its workers); empty without bench/commit_settings.py."""
        if not self.noting_commits:
            return {}
        trees: dict[int, list[tuple[int, int, float]]] = {}
        for process in [self.process, *self.workers]:
            path = Path(f"{self.commit_log}-{process.pid}.json")
            path.unlink(missing_ok=True)
            process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while not path.exists():
                if time.monotonic() > deadline:
                    raise SystemExit(f"process {process.pid} wrote no commits to {path}")
                time.sleep(0.01)
            for root_id, first, count, at in json.loads(path.read_text()):
                trees.setdefault(root_id, []).append((first, count, at))
            path.unlink()
        return trees

    def status(self) -> tuple[int, int]:
        """Peak resident memory (MiB) and threads of the process running the agents now
        (the largest worker, when there are workers)."""
        figures = []
        for process in self.workers or [self.process]:
            status = Path(f"/proc/{process.pid}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines())
            figures.append((int(fields["VmHWM"].split()[0]) // 1024, int(fields["Threads"])))
        return max(figures)


def agent_environment(llm: ScriptedLLM | None, *, layer: str) -> dict[str, str]:
    env = {**os.environ, "LOG_LEVEL": "WARNING"}
    if llm is not None:
        env.update(
            OPENAI_BASE_URL=llm.base_url,
            RESEARCH_MAX_AGENTS="400",
            RESEARCH_MAX_WORKING_ROOTS="1000",
            # The claim poll is left at its default: roots queued are announced (NOTIFY on
            # PostgreSQL), and a poll five times a second cost a busy server 3 ms a second.
            DATABASE_POOL_SIZE="60",
        )
    if layer == "redis":
        env["REDIS_URL"] = REDIS_URL
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- A user the clients act as ---------------------------------------------------------------


class Client:
    """An API token and a browser session of one user, and the clients that use them."""

    def __init__(self, server: Server, username: str):
        from django.contrib.auth.models import User
        from django.test import Client as DjangoClient
        from rest_framework.authtoken.models import Token

        user, _ = User.objects.get_or_create(username=username, defaults={"is_staff": True})
        user.is_staff = user.is_superuser = True
        user.save()
        self.token = Token.objects.get_or_create(user=user)[0].key
        browser = DjangoClient()
        browser.force_login(user)
        self.session = browser.cookies["sessionid"].value
        self.server = server

    def api(self):
        import httpx

        return httpx.AsyncClient(
            base_url=f"{self.server.url}/v1/gb",
            headers={"Authorization": f"Token {self.token}"},
            timeout=60,
        )

    def browser(self):
        import httpx

        return httpx.AsyncClient(
            base_url=self.server.url, cookies={"sessionid": self.session}, timeout=60
        )

    def socket(self, root_id: int, *, after: int = 0):
        import websockets

        query = f"?after={after}" if after else ""
        return websockets.connect(
            f"ws://127.0.0.1:{self.server.port}/ws/runs/{root_id}/{query}",
            origin=self.server.url,
            additional_headers={"Cookie": f"sessionid={self.session}"},
            open_timeout=10,
            max_size=None,
        )


# --- Scripts ---------------------------------------------------------------------------------


def script_tree(llm: ScriptedLLM, topic: str, delay: float) -> None:
    facets = ("history", "chemistry", "economics", "geography", "politics")[:CHILDREN]
    tasks = [f"{topic}: the {facet} side, with sources about {facet}" for facet in facets]
    spawns = [
        call("spawn_subagent", name=f"facet{index}", reason="one facet", task=task)
        for index, task in enumerate(tasks)
    ]
    llm.script(
        topic,
        slow(delay, calls(*spawns)),
        slow(delay, call("wait_subagents")),
        # The draft names its topic: the verifier's task, which quotes it, tells its tree.
        slow(delay, reply(f"root report on {topic}")),
    )
    for task in tasks:
        # A turn whose tool refuses at once. Since round eighteen of issue 25 it reads
        # nothing (a child that never spawned knows it has no sub-agents): these turns
        # measure the loop, the records and the pushes, not a tool's own work.
        turns = [slow(delay, call("cancel_subagent", name="nobody")) for _ in range(6)]
        llm.script(task, *turns, slow(delay, reply("facet report")))


async def start_tree(api, topic: str) -> int:
    response = await api.post("/research", json={"topic": topic, "max_steps": 10})
    response.raise_for_status()
    return response.json()["id"]


async def wait_trees(api, watchers: list[asyncio.Future], root_ids, timeout: float) -> list[dict]:
    """Wait until every root's watcher saw it finish, then read the roots once: the bench
    adds no polling of its own to the load it measures."""
    try:
        await asyncio.wait_for(asyncio.gather(*watchers), timeout)
    except TimeoutError:
        raise SystemExit(f"trees {root_ids} did not end within {timeout} s") from None
    return [(await api.get(f"/research/{root_id}")).json() for root_id in root_ids]


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _tree_wall(roots: list[dict]) -> float:
    return max(_seconds(min(r["created_at"] for r in roots), r["finished_at"]) for r in roots)


# --- Measurements with one channel layer -----------------------------------------------------


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure_layer(llm: ScriptedLLM, server: Server, layer: str, options) -> dict:
    client = Client(server, "bench")
    figures: dict = {"one_tree": {}, "concurrency": {}, "event_latency": {}}
    delays = [0.0, 0.05] if options.quick else [0.0, 0.05, 1.0]
    for delay in delays:
        progress(f"{layer}: one tree at {delay * 1000:.0f} ms per call")
        figures["one_tree"][delay] = asyncio.run(one_tree(llm, client, delay, layer))
    sizes = [50] if options.quick else [50, 100, 200]
    for agents in sizes:
        progress(f"{layer}: {agents} agents at 200 ms per call")
        figures["concurrency"][agents] = asyncio.run(
            many_trees(llm, client, server, agents // (CHILDREN + 1), 0.2, layer)
        )
    figures["event_latency"]["first tree after start"] = figures["one_tree"][0.0]["first_latency"]
    figures["event_latency"]["idle"] = figures["one_tree"][0.05]["latency"]
    figures["event_latency"]["loaded"] = figures["concurrency"][sizes[-1]]["latency"]
    figures["commit_latency"] = {
        "idle": figures["one_tree"][0.05]["commit_latency"],
        "loaded": figures["concurrency"][sizes[-1]]["commit_latency"],
    }
    return figures


def measure_workers(llm: ScriptedLLM, server: Server, options) -> dict:
    """The same loads with the agents in two runagents workers (two cores), the web process
    only serving; events reach it through Redis."""
    client = Client(server, "bench")
    asyncio.run(one_tree(llm, client, 0.0, "workers"))  # both workers have warmed up
    figures: dict = {"concurrency": {}}
    for agents in [50] if options.quick else [100, 200]:
        progress(f"2 workers: {agents} agents at 200 ms per call")
        figures["concurrency"][agents] = asyncio.run(
            many_trees(llm, client, server, agents // (CHILDREN + 1), 0.2, "workers")
        )
    return figures


async def one_tree(llm: ScriptedLLM, client: Client, delay: float, layer: str) -> dict:
    """One tree, twice: the first run after start, then a warm one; the second counts. The
    first's events are kept apart: they carry the process's first connections (Redis's
    among them), and would otherwise pass for the tail of an idle process's."""
    walls = []
    latencies: list[float] = []
    first_latencies: list[float] = []
    received: list[tuple[int, int, float]] = []
    for attempt in range(2):
        topic = f"{layer} one tree {delay} {attempt} {time.time()}"
        script_tree(llm, topic, delay)
        quiet_collector()
        async with client.api() as api:
            root_id = await start_tree(api, topic)
            kept = latencies if attempt else first_latencies
            watcher = asyncio.ensure_future(
                watch(client, root_id, kept, received if attempt else None)
            )
            roots = await wait_trees(api, [watcher], [root_id], timeout=120)
        walls.append(_tree_wall(roots))
    ideal = CRITICAL_PATH_CALLS * delay
    return {
        "ideal": ideal,
        "first": walls[0],
        "wall": walls[1],
        "latency": percentiles(latencies),
        "commit_latency": commit_latencies(client.server, received),
        "first_latency": percentiles(first_latencies),
    }


async def many_trees(llm, client: Client, server: Server, trees: int, delay: float, layer: str):
    """`trees` trees started at once; viewers open their pages and sockets meanwhile."""
    topics = [f"{layer} tree {index} of {trees} {time.time()}" for index in range(trees)]
    for topic in topics:
        script_tree(llm, topic, delay)
    quiet_collector()
    latencies: list[float] = []
    received: list[tuple[int, int, float]] = []
    async with client.api() as api:
        started = time.monotonic()
        root_ids = await asyncio.gather(*(start_tree(api, topic) for topic in topics))
        viewers = min(trees, 20)
        handshakes = await asyncio.gather(
            *(open_socket(client, root_id) for root_id in root_ids[:viewers])
        )
        pages = await load_pages(client, root_ids[:5])
        watchers = [asyncio.ensure_future(watch(client, r, latencies, received)) for r in root_ids]
        rss, threads = server.status()
        roots = await wait_trees(api, watchers, root_ids, timeout=600)
        rss, threads = max(rss, server.status()[0]), max(threads, server.status()[1])
    wall = _tree_wall(roots)
    ideal = CRITICAL_PATH_CALLS * delay
    first = min(r["created_at"] for r in roots)
    spread = max(_seconds(first, r["created_at"]) for r in roots)
    own = sorted(_seconds(r["created_at"], r["finished_at"]) for r in roots)
    progress(
        f"  starts spread over {spread * 1000:.0f} ms; each tree's own wall "
        f"min {own[0]:.3f} p50 {own[len(own) // 2]:.3f} max {own[-1]:.3f} s"
    )
    failed = [root["id"] for root in roots if root["status"] != "done"]
    return {
        "trees": trees,
        "agents": trees * (CHILDREN + 1),
        "ideal": ideal,
        "wall": wall,
        "client_wall": time.monotonic() - started,
        "ratio": ideal / wall,
        "failed": failed,
        "rss_mib": rss,
        "threads": threads,
        "handshakes": percentiles(handshakes),
        "pages": percentiles(pages),
        "latency": percentiles(latencies),
        "commit_latency": commit_latencies(server, received),
    }


async def watch(
    client: Client, root_id: int, latencies: list[float], received: list | None = None
) -> None:
    """Follow a tree's live events until its root finishes; each event's delay from its
    stamp (`at`, set as its batch is written, before the commit) to this client, and, in
    `received`, (root id, number, when) of each, for its delay from the commit
    (commit_latencies). After 5 s of silence it reconnects with ?after= the last number it
    saw, as the page does: a channel layer may drop events for a slow socket (Redis keeps
    100 per channel), and the stored events fill the gap."""
    last = 0
    while True:
        async with client.socket(root_id, after=last) as websocket:
            try:
                while True:
                    raw = await asyncio.wait_for(websocket.recv(), 5)
                    arrived = time.time()
                    event = json.loads(raw)
                    if event.get("type") == "snapshot":
                        last = event["seq"]
                        root = next(run for run in event["runs"] if run["id"] == root_id)
                        if root["status"] in ("done", "failed"):
                            return
                        continue
                    last = max(last, event["seq"])
                    latencies.append(arrived - datetime.fromisoformat(event["at"]).timestamp())
                    if received is not None:
                        received.append((root_id, event["seq"], arrived))
                    if event["type"] == "run.finished" and event["run"] == root_id:
                        return
            except TimeoutError:
                continue


async def open_socket(client: Client, root_id: int) -> float:
    """Seconds from opening a viewer's socket to its snapshot."""
    started = time.monotonic()
    async with client.socket(root_id) as websocket:
        await asyncio.wait_for(websocket.recv(), 10)
    return time.monotonic() - started


async def load_pages(client: Client, root_ids: list[int]) -> list[float]:
    """Seconds to load each run page with its static files, one page after another."""
    seconds = []
    async with client.browser() as browser:
        for root_id in root_ids:
            started = time.monotonic()
            page = await browser.get(f"/runs/{root_id}/")
            page.raise_for_status()
            for asset in ("canopy.js", "canopy.css", "vendor/d3-hierarchy.min.js"):
                (await browser.get(f"/static/{asset}")).raise_for_status()
            seconds.append(time.monotonic() - started)
    return seconds


# --- Lists at 100,000 runs -------------------------------------------------------------------


def measure_lists(options) -> dict:
    """The run list (first page, page 1,000), a tree and the admin's list, at 100,000 runs
    across 1,000 users (one of whom has 60,000)."""
    from research.models import Run

    progress("lists: inserting runs")
    heavy = populate(total=20_000 if options.quick else 100_000)
    deep_page = 200 if options.quick else 1000
    runs = Run.objects.filter(owner__username=heavy).order_by("-created_at", "-id")
    # The cursor DRF hands out for page `deep_page`: the position of the page before's last.
    position = runs.values_list("created_at", flat=True)[(deep_page - 1) * 50 - 1]
    cursor = base64.b64encode(urlencode({"p": str(position)}).encode()).decode()
    tree_id = runs.values_list("pk", flat=True).first()
    with Server() as server:
        client = Client(server, heavy)
        return asyncio.run(time_lists(client, cursor=cursor, tree_id=tree_id, deep_page=deep_page))


def populate(*, total: int) -> str:
    """Insert `total` finished roots: 60% for one user, the rest over 999 others."""
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.db import transaction
    from django.utils import timezone

    from research.models import Run
    from research.sql import Insert

    users = User.objects.bulk_create(User(username=f"lister{index:04d}") for index in range(1000))
    heavy_count = total * 6 // 10
    owners = [users[0].pk] * heavy_count + [
        users[1 + index % 999].pk for index in range(total - heavy_count)
    ]
    fields = [
        "owner", "depth", "name", "reason", "topic", "model", "status", "state", "max_steps",
        "steps", "input_tokens", "output_tokens", "cost_usd", "tree_cost_usd",
        "tree_input_tokens", "tree_output_tokens", "report", "error", "created_at",
        "cancel_requested", "cancel_reason", "event_seq",
    ]  # fmt: skip
    # Every other column that may not be NULL gets its model default, as the ORM would give
    # it (an INSERT of our own sends no defaults, and new columns keep coming).
    defaults = {
        field.name: field.get_default()
        for field in Run._meta.concrete_fields
        if not field.null and not field.primary_key and field.has_default()
        and field.name not in fields
    }  # fmt: skip
    fields += list(defaults)
    insert = Insert(Run, fields)
    base = timezone.now() - timedelta(days=30)
    batch = 2000
    for start in range(0, total, batch):
        rows = [
            (owner, 0, "", "", f"listed topic {start + offset}", "scripted", "done", "ended",
             10, 3, 300, 60, 0, 0, 300, 60, "a report", "",
             base + timedelta(seconds=start + offset), False, "", 0, *defaults.values())
            for offset, owner in enumerate(owners[start : start + batch])
        ]  # fmt: skip
        with transaction.atomic():
            insert.rows(rows)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Run._meta.db_table}")
    return users[0].username


async def time_lists(client: Client, *, cursor: str, tree_id: int, deep_page: int) -> dict:
    async with client.api() as api, client.browser() as browser:
        targets = {
            "list, first page": lambda: api.get("/research"),
            f"list, page {deep_page}": lambda: api.get(f"/research?cursor={cursor}"),
            "tree": lambda: api.get(f"/research/{tree_id}/tree"),
            "admin run list": lambda: browser.get("/admin/research/run/"),
        }
        figures = {}
        for name, request in targets.items():
            seconds = []
            for _ in range(25):
                started = time.monotonic()
                response = await request()
                response.raise_for_status()
                seconds.append(time.monotonic() - started)
            figures[name] = percentiles(seconds)
    return figures


# --- Report ----------------------------------------------------------------------------------


def commit_latencies(server: Server, received: list[tuple[int, int, float]]) -> dict:
    """The percentiles of each received event's delay from the COMMIT of its batch
    (Server.commits), the delay issue 25's goal names, with how many received events had no
    note ("unmatched": one read from the table after a reconnect, say); {"n": 0} when the
    server notes none."""
    trees = server.commits()
    if not trees:
        return {"n": 0}
    delays = []
    for root_id, seq, arrived in received:
        for first, count, committed in trees.get(root_id, ()):
            if first <= seq < first + count:
                delays.append(arrived - committed)
                break
    return {**percentiles(delays), "unmatched": len(received) - len(delays)}


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def at(percent: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(percent / 100 * (len(ordered) - 1))))]

    return {"n": len(values), "p50": at(50), "p95": at(95), "p99": at(99), "max": ordered[-1]}


def ms(value: float) -> str:
    return f"{value * 1000:.0f} ms"


def print_table(results: dict) -> None:
    print("\n| figure | goal | measured |\n| --- | --- | --- |")
    for layer in ("memory", "redis"):
        figures = results[layer]
        for delay, tree in figures["one_tree"].items():
            over = tree["wall"] / tree["ideal"] - 1 if tree["ideal"] else None
            measured = (
                f"{tree['wall']:.2f} s against {tree['ideal']:.2f} s"
                + (f" (+{over:.0%})" if over is not None else "")
                + f"; first run after start {tree['first']:.2f} s"
            )
            print(
                f"| one tree at {delay * 1000:.0f} ms per call, {layer} | <= 5% over | {measured} |"
            )
        for load in figures["concurrency"].values():
            print(
                f"| {load['trees']} trees ({load['agents']} agents) at 200 ms, {layer} | >= 90% | "
                f"{load['ratio']:.0%} ({load['wall']:.2f} s against {load['ideal']:.2f} s); "
                f"RSS {load['rss_mib']} MiB, {load['threads']} threads"
                + (f"; failed {load['failed']}" if load["failed"] else "")
                + " |"
            )
            hs, pages = load["handshakes"], load["pages"]
            print(
                f"| viewers opening sockets meanwhile, {layer} | within 1 s | "
                f"p50 {ms(hs['p50'])}, max {ms(hs['max'])} ({hs['n']}) |"
            )
            print(
                f"| run pages with static files meanwhile, {layer} | under 1 s | "
                f"p50 {ms(pages['p50'])}, max {ms(pages['max'])} ({pages['n']}) |"
            )
        # From the COMMIT of its batch (the goal's), then from the stamp each event carries,
        # set as its batch is written, before its last statements and the COMMIT.
        for state, latency in figures.get("commit_latency", {}).items():
            if latency.get("n"):
                unmatched = latency["unmatched"]
                print(
                    f"| event commit to socket, {state}, {layer} | p99 < 50 ms | "
                    f"p50 {ms(latency['p50'])}, p95 {ms(latency['p95'])}, "
                    f"p99 {ms(latency['p99'])} ({latency['n']} events"
                    + (f", {unmatched} more with no note" if unmatched else "")
                    + ") |"
                )
        for state, latency in figures["event_latency"].items():
            if latency.get("n"):
                print(
                    f"| event stamped before its commit to socket, {state}, {layer} | "
                    f"p99 < 50 ms | p50 {ms(latency['p50'])}, p95 {ms(latency['p95'])}, "
                    f"p99 {ms(latency['p99'])} ({latency['n']} events) |"
                )
    for load in results["workers"]["concurrency"].values():
        stamped, committed = load["latency"], load.get("commit_latency", {})
        delays = [
            f"{ms(figure['p99'])} from {since}"
            for since, figure in (("commit", committed), ("stamp", stamped))
            if figure.get("n")
        ]
        print(
            f"| {load['trees']} trees ({load['agents']} agents) at 200 ms, 2 runagents workers "
            f"| >= 90% | {load['ratio']:.0%} ({load['wall']:.2f} s against {load['ideal']:.2f} s)"
            f"; sockets p50 {ms(load['handshakes']['p50'])}, pages p50 {ms(load['pages']['p50'])}"
            + (f"; events p99 {', '.join(delays)}" if delays else "")
            + " |"
        )
    for name, timing in results["lists"].items():
        print(
            f"| {name} at 100,000 runs | p95 < 50 ms | p50 {ms(timing['p50'])}, "
            f"p95 {ms(timing['p95'])} |"
        )


if __name__ == "__main__":
    main()
