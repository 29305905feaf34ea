"""`make soak`: many trees, viewers that drop and resume, Redis restarted and PostgreSQL
backends terminated meanwhile; then checks that nothing was lost or leaked (issue 16).

    .venv/bin/python bench/soak.py [--roots 50] [--viewers 20] [--json soak.json]

It builds a database of its own (`canopy_soak`), a Redis server of its own (a free port) and a
scripted LLM, and serves the app with daphne (agents in the web process). Then:

- starts ROOTS researches over REST, each spawning two sub-agents that message each other;
- VIEWERS websocket viewers follow the trees (viewer v follows roots v, v+VIEWERS, ...), each
  socket closing every 1-4 s and resuming with `?after=<last seq applied>`, as the page does;
- meanwhile, Redis is stopped and restarted and every PostgreSQL backend of the app is
  terminated (pg_terminate_backend), several times each.

At the end it checks, and exits 1 on any failure:
- no request was refused: every root started (and the calm roots after the faults) was a
  2xx; a refusal of any kind (a 429, a 500, no answer) is counted, by what was asked;
- every root the server accepted was neither lost (no row) nor failed;
- every run is in a recorded state (done or failed), none left queued or working;
- every viewer applied every stored event of its trees exactly once, in order (the page's
  rule: events are applied by sequence number, a copy already applied is dropped);
- the database's counts match the events: runs and run.created, finished runs and
  run.finished, messages and run.message, model calls and run.usage, and each run's last
  run.usage equals its row (steps and tokens); each tree's numbers run 1..N with no gap;
- the server's threads, database connections and memory are back near where they started.

It prints the figures, and writes them as JSON with --json (docs/reliability.md quotes them).
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from tests.servers import RedisServer, free_port, spawn_daphne  # noqa: E402

PG = os.environ.get("SOAK_POSTGRES", "postgres://postgres@127.0.0.1:5432")
DB_NAME = os.environ.get("SOAK_DATABASE", "canopy_soak")
PASSWORD = "soak password"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the parts: Redis, the database, the server --------------------------------------------


def create_database() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            [DB_NAME],
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        admin.execute(f'CREATE DATABASE "{DB_NAME}"')


def terminate_backends() -> int:
    """End every connection of the app to its database (not this script's own)."""
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name <> 'soak-check' AND pid <> pg_backend_pid()",
            [DB_NAME],
        ).fetchall()
    return len(rows)


def app_connections() -> dict[str, int]:
    """The app's connections to its database: all (the pool keeps idle ones a while) and
    those busy (in a query or a transaction)."""
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        total, busy = admin.execute(
            "SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity "
            "WHERE datname = %s AND application_name <> 'soak-check'",
            [DB_NAME],
        ).fetchone()
    return {"db_connections": total, "db_busy": busy}


def process_figures(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "threads": int(values["Threads"].strip()),
        "rss_mb": int(values["VmRSS"].split()[0]) // 1024,
    }


# --- the scripted model --------------------------------------------------------------------


def script_trees(llm, roots: int, turn: float) -> None:
    """Each root spawns two halves and waits; the halves message each other, read their
    inboxes and answer. Every model turn of a half takes `turn` seconds, so faults land
    while the trees work."""
    from agents.llm.scripted import call, reply, slow

    for i in range(roots):
        llm.script(
            f"soak root {i}:",
            call("spawn_subagent", name="left", reason="one half", task=f"soak {i} left half"),
            call("spawn_subagent", name="right", reason="other half", task=f"soak {i} right half"),
            slow(turn / 2, call("wait_subagents")),
            call("wait_subagents"),
            reply(f"Root {i} report: both halves are in."),
        )
        for half, other in (("left", "right"), ("right", "left")):
            llm.script(
                f"soak {i} {half} half",
                slow(turn, call("list_siblings")),
                slow(turn, call("send_message", to=other, text=f"{half} of {i} says hello")),
                slow(turn, call("read_messages", wait_seconds=1)),
                slow(turn, call("read_messages")),
                slow(turn, reply(f"{half} half of {i} done")),
            )


# --- viewers -------------------------------------------------------------------------------


@dataclass
class Follow:
    """One viewer's socket on one tree, as the page applies its events."""

    viewer: int
    root_id: int
    applied: list[int] = field(default_factory=list)  # seqs in the order applied
    pending: dict[int, dict] = field(default_factory=dict)
    duplicates: int = 0
    out_of_order: int = 0
    connects: int = 0
    drops: int = 0  # closed by the viewer on purpose
    broken: int = 0  # closed by the server or the network
    snapshot_seq: int | None = None

    @property
    def last(self) -> int:
        return self.applied[-1] if self.applied else 0

    def receive(self, event: dict) -> None:
        seq = event["seq"]
        if seq <= self.last or seq in self.pending:
            self.duplicates += 1
            return
        if seq != self.last + 1:
            self.out_of_order += 1
        self.pending[seq] = event
        while self.last + 1 in self.pending:
            self.pending.pop(self.last + 1)
            self.applied.append(self.last + 1)


class Viewers:
    def __init__(self, base_url: str, cookie: str, done: threading.Event) -> None:
        self.ws_url = base_url.replace("http://", "ws://")
        self.origin = base_url
        self.cookie = cookie
        self.done = done
        self.follows: list[Follow] = []
        self.threads: list[threading.Thread] = []

    def follow(self, viewer: int, root_id: int) -> None:
        follow = Follow(viewer, root_id)
        self.follows.append(follow)
        thread = threading.Thread(target=self._run, args=(follow,), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _connect(self, follow: Follow):
        from websockets.sync.client import connect

        follow.connects += 1
        return connect(
            f"{self.ws_url}/ws/runs/{follow.root_id}/?after={follow.last}",
            origin=self.origin,
            additional_headers={"Cookie": f"sessionid={self.cookie}"},
            max_size=None,
            open_timeout=10,
            proxy=None,
        )

    def _run(self, follow: Follow) -> None:
        rng = random.Random(follow.viewer * 1000 + follow.root_id)
        while not self.done.is_set():
            self._session(follow, until=time.monotonic() + rng.uniform(1.0, 4.0))
            time.sleep(rng.uniform(0.05, 0.3))
        # The end: one last resume, as a page that reconnects, until the socket is quiet.
        self._session(follow, until=None)

    def _session(self, follow: Follow, *, until: float | None) -> None:
        try:
            with self._connect(follow) as socket_:
                quiet = 0.0
                while True:
                    if until is not None and time.monotonic() >= until:
                        follow.drops += 1
                        return
                    try:
                        frame = socket_.recv(timeout=0.5)
                    except TimeoutError:
                        quiet += 0.5
                        if until is None and quiet >= 2.0:
                            return
                        continue
                    quiet = 0.0
                    event = json.loads(frame)
                    if event.get("type") == "snapshot":
                        follow.snapshot_seq = event["seq"]  # never asked for: after=N always
                        continue
                    follow.receive(event)
        except Exception:
            follow.broken += 1
            time.sleep(0.3)


# --- faults --------------------------------------------------------------------------------


@dataclass
class Faults:
    redis_restarts: int = 0
    redis_down_seconds: float = 0.0
    backend_kills: int = 0
    backends_terminated: int = 0


def inject_faults(redis: RedisServer, faults: Faults, stop: threading.Event, every: float) -> None:
    kinds = ["redis", "postgres"]
    turn = 0
    while not stop.wait(every):
        kind = kinds[turn % 2]
        turn += 1
        if kind == "redis":
            down = 3.0
            log(f"fault: Redis stops for {down:g} s")
            redis.stop()
            time.sleep(down)
            redis.start()
            faults.redis_restarts += 1
            faults.redis_down_seconds += down
        else:
            ended = terminate_backends()
            log(f"fault: {ended} PostgreSQL backends of the app terminated")
            faults.backend_kills += 1
            faults.backends_terminated += ended


# --- the requests --------------------------------------------------------------------------


@dataclass
class Refusals:
    """Every request the server did not accept (any non-2xx, or no answer), by what it
    asked: a soak that lost a root at the door failed like one that lost it later."""

    by_what: Counter = field(default_factory=Counter)
    by_status: Counter = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)

    def post(self, api, what: str, path: str, **kwargs) -> dict | None:
        """The answer's JSON, or None (and counted) if refused."""
        import httpx

        try:
            response = api.post(path, **kwargs)
        except httpx.HTTPError as error:
            return self._refused(what, "no answer", repr(error))
        if not response.is_success:
            return self._refused(what, str(response.status_code), " ".join(response.text.split()))
        return response.json()

    def _refused(self, what: str, status: str, text: str) -> None:
        text = text[:200]
        self.by_what[what] += 1
        self.by_status[status] += 1
        if len(self.samples) < 10:
            self.samples.append(f"{what}: {status} {text}")
        log(f"{what} refused: {status} {text}")

    @property
    def total(self) -> int:
        return sum(self.by_what.values())

    def problems(self) -> list[str]:
        if not self.total:
            return []
        return [
            f"{self.total} requests refused ({dict(self.by_what)}; by status "
            f"{dict(self.by_status)}), e.g. {self.samples[0]}"
        ]


# --- the checks ----------------------------------------------------------------------------


def check_roots(asked: int, root_ids: list[int], refused: int) -> tuple[dict, list[str]]:
    """What became of every root asked for: refused at the door, lost (accepted, but no
    row), failed, not ended, done."""
    from research.models import ACTIVE_STATUSES, Run

    rows = dict(
        Run.objects.filter(pk__in=root_ids, parent__isnull=True).values_list("pk", "status")
    )
    lost = [pk for pk in root_ids if pk not in rows]
    failed = [pk for pk, status in rows.items() if status == "failed"]
    outcome = {
        "asked": asked,
        "accepted": len(root_ids),
        "refused": refused,
        "lost": len(lost),
        "failed": len(failed),
        "not_ended": sum(1 for status in rows.values() if status in ACTIVE_STATUSES),
        "done": sum(1 for status in rows.values() if status == "done"),
    }
    problems = []
    if refused:
        problems.append(f"{refused} of {asked} roots were refused when started")
    if lost:
        problems.append(f"{len(lost)} roots accepted and then lost: {lost[:10]}")
    if failed:
        errors = Counter(Run.objects.filter(pk__in=failed).values_list("error", flat=True))
        problems.append(f"{len(failed)} roots failed: {dict(errors.most_common(3))}")
    return outcome, problems


def check_runs(root_ids: list[int]) -> tuple[dict, list[str]]:
    from research.models import ACTIVE_STATUSES, Run

    runs = Run.objects.filter(root_id__in=root_ids)
    statuses = Counter(runs.values_list("status", flat=True))
    errors = Counter(runs.filter(status="failed").values_list("error", flat=True))
    problems = []
    active = runs.filter(status__in=ACTIVE_STATUSES).count()
    if active:
        problems.append(f"{active} runs are still queued or working")
    return {
        "runs": runs.count(),
        "statuses": dict(statuses),
        "errors": dict(errors.most_common(6)),
    }, problems


def check_counts(root_ids: list[int]) -> tuple[dict, list[str]]:
    """The database's rows against the stored events, tree by tree."""
    from research.models import Event, LLMCall, Message, Run

    problems = []
    totals = Counter()
    for root_id in root_ids:
        events = list(Event.objects.filter(root_id=root_id).order_by("seq").values("payload"))
        payloads = [row["payload"] for row in events]
        seqs = [payload["seq"] for payload in payloads]
        if seqs != list(range(1, len(seqs) + 1)):
            problems.append(f"tree {root_id}: event numbers are not 1..{len(seqs)}")
        by_type = Counter(payload["type"] for payload in payloads)
        runs = {run.pk: run for run in Run.objects.filter(root_id=root_id)}
        calls = LLMCall.objects.filter(run__root_id=root_id).count()
        messages = Message.objects.filter(from_run__root_id=root_id).count()
        finished = sum(1 for run in runs.values() if run.status in ("done", "failed"))
        expected = {
            "run.created": len(runs),
            "run.finished": finished,
            "run.usage": calls,
            "run.message": messages,
        }
        for kind, count in expected.items():
            if by_type[kind] != count:
                problems.append(f"tree {root_id}: {by_type[kind]} {kind} events, {count} rows")
        last_usage = {}
        final_status = {}
        for payload in payloads:
            if payload["type"] == "run.usage":
                last_usage[payload["run"]] = payload
            if payload["type"] == "run.finished":
                final_status[payload["run"]] = payload["status"]
        for run in runs.values():
            usage = last_usage.get(run.pk)
            row = (run.steps, run.input_tokens, run.output_tokens)
            seen = (
                (usage["steps"], usage["input_tokens"], usage["output_tokens"])
                if usage
                else (0, 0, 0)
            )
            if seen != row:
                problems.append(f"run {run.pk}: usage events say {seen}, its row {row}")
            if final_status.get(run.pk) != run.status:
                said = final_status.get(run.pk)
                problems.append(f"run {run.pk}: finished event says {said}, row {run.status}")
        totals.update(events=len(payloads), calls=calls, messages=messages, runs=len(runs), trees=1)
    return dict(totals), problems


def check_viewers(follows: list[Follow]) -> tuple[dict, list[str]]:
    from research.models import Event

    problems = []
    stored = defaultdict(list)
    for root_id, seq in Event.objects.filter(
        root_id__in={follow.root_id for follow in follows}
    ).values_list("root_id", "seq"):
        stored[root_id].append(seq)
    for follow in follows:
        expected = sorted(stored[follow.root_id])
        if follow.applied != expected:
            missing = len(set(expected) - set(follow.applied))
            problems.append(
                f"viewer {follow.viewer} on tree {follow.root_id}: applied "
                f"{len(follow.applied)} of {len(expected)} events ({missing} missing)"
            )
        if follow.snapshot_seq is not None:
            problems.append(f"viewer {follow.viewer} got a snapshot it never asked for")
    return {
        "sockets": len(follows),
        "connects": sum(follow.connects for follow in follows),
        "drops_by_viewer": sum(follow.drops for follow in follows),
        "closed_by_server_or_network": sum(follow.broken for follow in follows),
        "events_applied": sum(len(follow.applied) for follow in follows),
        "copies_dropped": sum(follow.duplicates for follow in follows),
        "arrived_out_of_order": sum(follow.out_of_order for follow in follows),
        "events_lost": sum(
            len(set(stored[follow.root_id]) - set(follow.applied)) for follow in follows
        ),
    }, problems


# "Back near where they started": the agents' threads are gone (the server's own thread
# pools may keep a few more workers than at the start), no connection is busy, the pool
# holds no more than its size, and memory grew by less than this.
THREADS_SLACK = 16
MEMORY_SLACK_MB = 150
POOL_SIZE = 20


def check_resources(start: dict, end: dict) -> list[str]:
    problems = []
    if end["threads"] > start["threads"] + THREADS_SLACK:
        problems.append(f"server threads {start['threads']} -> {end['threads']}")
    if end["db_busy"] > start["db_busy"]:
        problems.append(f"busy database connections {start['db_busy']} -> {end['db_busy']}")
    if end["db_connections"] > POOL_SIZE + 2:
        problems.append(
            f"database connections {start['db_connections']} -> {end['db_connections']}"
        )
    if end["rss_mb"] > start["rss_mb"] + MEMORY_SLACK_MB:
        problems.append(f"server memory {start['rss_mb']} MB -> {end['rss_mb']} MB")
    return problems


def after_the_storm(api, llm, refusals: Refusals, count: int, timeout: float = 60) -> list[str]:
    """A few more roots, once the faults stopped: the server still claims, runs and ends
    them (a leaked connection or a wedged loop would leave them queued)."""
    from agents.llm.scripted import reply
    from research.models import Run

    ids = []
    for i in range(count):
        llm.script(f"calm root {i}:", reply(f"calm {i}"))
        root = refusals.post(
            api, "calm root start", "/v1/gb/research", json={"topic": f"calm root {i}: after"}
        )
        if root is None:
            return [f"after the faults, calm root {i} was refused"]
        ids.append(root["id"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Run.objects.filter(pk__in=ids, status="done").count() == count:
            return []
        time.sleep(0.5)
    statuses = Counter(Run.objects.filter(pk__in=ids).values_list("status", flat=True))
    return [f"after the faults, {count} new roots ended {dict(statuses)}, not all done"]


# --- the run -------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roots", type=int, default=50)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--fault-every", type=float, default=5.0, help="seconds between faults")
    parser.add_argument("--turn-seconds", type=float, default=3.0, help="each model turn")
    parser.add_argument("--timeout", type=float, default=600.0, help="for every run to end")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    started = time.monotonic()

    redis = RedisServer()
    redis.start()
    create_database()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "research.settings",
        "DATABASE_URL": f"{PG}/{DB_NAME}",
        "REDIS_URL": redis.url,
        "OPENAI_API_KEY": "soak-key",
        "RESEARCH_MODEL": "scripted",
        "RESEARCH_MODEL_PRICES": '{"scripted": [1.0, 2.0]}',
        "RESEARCH_MAX_WORKING_ROOTS": str(args.roots + 10),
        # Counted (so the Redis faults reach the throttles) but never reached: a refused
        # root is a failure of the soak, and 30/hour would refuse the 31st.
        "THROTTLE_RESEARCH_START": "100000/hour",
        "RESEARCH_MAX_AGENTS": "24",
        "RESEARCH_HEARTBEAT_SECONDS": "1",
        "DATABASE_POOL_SIZE": str(POOL_SIZE),
        "LLM_MAX_RETRIES": "3",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(
        {key: env[key] for key in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL")}
    )
    os.environ["OPENAI_API_KEY"] = "soak-key"
    # This script's own connections (its checks) are spared when backends are terminated.
    os.environ["PGAPPNAME"] = "soak-check"
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=PROJECT, env=env, check=True
    )

    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from agents.llm.scripted import ScriptedLLM

    user = User.objects.create_user("soak", "soak@example.org", PASSWORD)
    token = Token.objects.create(user=user).key
    browser = Client()
    browser.login(username="soak", password=PASSWORD)
    cookie = browser.cookies["sessionid"].value

    llm = ScriptedLLM().start()
    script_trees(llm, args.roots, args.turn_seconds)
    env["OPENAI_BASE_URL"] = llm.base_url
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server_log_path = Path(tempfile.gettempdir()) / "canopy-soak-daphne.log"
    server_log = open(server_log_path, "w")  # noqa: SIM115
    server = spawn_daphne(port, env=env, output=server_log)
    problems: list[str] = []
    report: dict = {"roots": args.roots, "viewers": args.viewers}
    try:
        import httpx

        api = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Token {token}"}, timeout=30
        )
        for _ in range(200):
            try:
                api.get("/v1/gb/research")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        time.sleep(3)  # the pool's warm-up
        start = {**process_figures(server.pid), **app_connections()}
        log(f"server up: {start}")

        faults = Faults()
        done = threading.Event()
        stop_faults = threading.Event()
        viewers = Viewers(base_url, cookie, done)
        fault_thread = threading.Thread(
            target=inject_faults, args=(redis, faults, stop_faults, args.fault_every), daemon=True
        )
        fault_thread.start()

        root_ids = []
        refusals = Refusals()
        for i in range(args.roots):
            time.sleep(0.1)
            root = refusals.post(
                api, "root start", "/v1/gb/research", json={"topic": f"soak root {i}: two halves"}
            )
            if root is None:
                continue
            root_ids.append(root["id"])
            viewers.follow(i % args.viewers, root_ids[-1])
        refused = refusals.by_what["root start"]
        log(
            f"{len(root_ids)} roots started, {refused} refused, "
            f"{len(viewers.follows)} sockets following"
        )

        from research.models import ACTIVE_STATUSES, Run

        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            active = Run.objects.filter(status__in=ACTIVE_STATUSES).count()
            if not active:
                break
            time.sleep(1)
        stop_faults.set()
        fault_thread.join()
        log("every run ended" if not active else f"{active} runs still active at the timeout")
        # Started again from this thread: the server the fault thread started gets SIGTERM
        # as that thread ends (tests.servers._die_with_parent follows the thread), which a
        # check of the process here could miss, and the viewers' last resume then met a dead
        # Redis.
        redis.start()
        done.set()
        for thread in viewers.threads:
            thread.join(30)
        time.sleep(5)  # agent threads and connections wind down
        end = {**process_figures(server.pid), **app_connections()}
        log(f"server at the end: {end}")

        roots, found = check_roots(args.roots, root_ids, refused)
        problems += found
        runs, found = check_runs(root_ids)
        problems += found
        counts, found = check_counts(root_ids)
        problems += found
        seen, found = check_viewers(viewers.follows)
        problems += found
        problems += check_resources(start, end)
        problems += after_the_storm(api, llm, refusals, 5)
        problems += refusals.problems()
        log(
            "roots: {asked} asked, {accepted} accepted, {refused} refused, {lost} lost, "
            "{failed} failed, {not_ended} not ended, {done} done".format(**roots)
        )
        log(f"requests refused: {refusals.total} {dict(refusals.by_what)}")
        report.update(
            roots_refused=refused,
            root_outcomes=roots,
            requests_refused={"total": refusals.total, **refusals.by_what},
            seconds=round(time.monotonic() - started),
            faults=faults.__dict__,
            runs=runs,
            counts=counts,
            viewers_seen=seen,
            server_start=start,
            server_end=end,
            scripted_llm_errors=len(llm.errors),
            problems=problems,
        )
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        llm.stop()
        redis.stop()
        server_log.close()
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if problems:
        log(f"SOAK FAILED: {len(problems)} problems (the server's log: {server_log_path})")
        for problem in problems[:40]:
            print("  -", problem)
        return 1
    log(f"soak passed in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
