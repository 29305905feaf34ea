"""Fixtures shared by the suite."""

import contextlib
from collections.abc import Iterator

import pytest

from agents.llm import reset_clients
from agents.llm.scripted import ScriptedLLM


@pytest.fixture(autouse=True)
def _no_loop_recorded_for_async_to_sync():
    """asgiref records, per thread, the loop a thread-sensitive call last came from, and
    hands that thread's later async_to_sync calls to it without asking whether it still runs:
    a loop stopped but not closed takes the call and never runs it (asgiref#545, #558), and
    the test waits for ever. So no test inherits the loop an earlier one left recorded."""
    yield
    from asgiref.sync import SyncToAsync

    for name in ("main_event_loop", "main_event_loop_pid"):
        SyncToAsync.threadlocal.__dict__.pop(name, None)


@pytest.fixture
def own_channel_layer():
    """A channel layer of this test's own, dropped at its end. channels_redis keeps, per layer
    object, one asyncio lock for receiving on the process's channel, released by a clean-up
    task after each message: a test whose loop closes before that task ran leaves the lock
    held and bound to the dead loop, and the next test to receive fails with "bound to a
    different event loop". A server runs one loop for its life, so only tests meet this."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def layer_on_own_redis(settings):
    """`with layer_on_own_redis(backend) as server:` the channel layer `backend` (Redis's
    pub/sub layer, the default with Redis, unless given) on a Redis server of the test's own,
    which it may stop and start again; the server, then the layers built meanwhile, are gone
    afterwards."""
    import shutil

    from channels.layers import channel_layers

    from tests.servers import RedisServer

    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")

    @contextlib.contextmanager
    def on_own_redis(
        backend: str = "channels_redis.pubsub.RedisPubSubChannelLayer",
    ) -> Iterator[RedisServer]:
        try:
            with RedisServer() as server:
                config = {"hosts": [{"address": server.url}]}
                settings.CHANNEL_LAYERS = {"default": {"BACKEND": backend, "CONFIG": config}}
                channel_layers.backends.clear()
                yield server
        finally:
            channel_layers.backends.clear()

    return on_own_redis


@pytest.fixture
def scripted_llm(settings):
    """A scripted OpenAI-compatible endpoint that every real model name now talks to."""
    with ScriptedLLM() as llm:
        settings.OPENAI_BASE_URL = llm.base_url
        reset_clients()
        yield llm
    # The shared client points at a server that is gone: the next test builds its own.
    reset_clients()


# --- Users, API clients and run trees (foundation) -------------------------------------------
# HealthChecks' convention: alice owns what a test builds; bob and charlie are other users,
# so every feature gets its access test for free (bob shares nothing, charlie has no access).

from collections.abc import Callable  # noqa: E402

from django.contrib.auth.models import User  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from research import services  # noqa: E402
from research.models import Run  # noqa: E402

PASSWORD = "correct horse battery staple"
DEFAULT_TOPIC = "How do Python's context managers and exceptions interact?"


@pytest.fixture
def web(settings):
    """A local site (tests/fakeweb.py) the agents may read: READ_PAGE_ALLOWED_HOSTS lets it
    through the address guard (daphne started by a test gets it from settings too)."""
    from tests.fakeweb import FakeWeb

    with FakeWeb() as site:
        settings.READ_PAGE_ALLOWED_HOSTS = [site.host]
        yield site


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_user("alice", "alice@example.org", PASSWORD)


@pytest.fixture
def bob(db) -> User:
    return User.objects.create_user("bob", "bob@example.org", PASSWORD)


@pytest.fixture
def charlie(db) -> User:
    return User.objects.create_user("charlie", "charlie@example.org", PASSWORD)


@pytest.fixture
def admin_user(db) -> User:
    """A staff superuser; overrides pytest-django's, so `admin_client` logs in as this one."""
    return User.objects.create_superuser("admin", "admin@example.org", PASSWORD)


@pytest.fixture
def api_for() -> Callable[[User], APIClient]:
    """`api_for(bob)`: a DRF client authenticated as that user."""

    def client_for(user: User) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    return client_for


@pytest.fixture
def api(api_for, alice) -> APIClient:
    """A DRF client authenticated as alice."""
    return api_for(alice)


@pytest.fixture
def run_factory(alice) -> Callable[..., Run]:
    """Start a root through services.run_start: alice's unless `owner=` says otherwise.

    The working-roots limit applies as in production: finish runs (services.run_finish) or
    raise settings.RESEARCH_MAX_WORKING_ROOTS to start more than three.
    """

    def start(*, owner: User | None = None, topic: str = DEFAULT_TOPIC, **kwargs) -> Run:
        return services.run_start(owner=owner or alice, topic=topic, **kwargs)

    return start


@pytest.fixture
def subagent_factory() -> Callable[..., Run]:
    """Record a sub-agent of a run through services.subagent_create, as subagent_spawn does."""

    def spawn(parent: Run, name: str, *, topic: str = "", max_steps: int = 5) -> Run:
        launch = services.Launch(
            name=name,
            reason=f"{name} covers one facet",
            task=topic or f"the {name} facet of {parent.topic[:60]}",
            max_steps=max_steps,
        )
        return services.subagent_create(parent_id=parent.pk, launch=launch)

    return spawn


@pytest.fixture
def tree_factory(run_factory, subagent_factory) -> Callable[..., Run]:
    """A root with sub-agents (`children`), each with its own (`grandchildren`); returns the
    root. Every row goes through the services, so states and events exist as in production."""

    def build(
        *,
        owner: User | None = None,
        children: tuple[str, ...] = ("history", "semantics"),
        grandchildren: tuple[str, ...] = ("examples",),
        **kwargs,
    ) -> Run:
        root = run_factory(owner=owner, **kwargs)
        for name in children:
            child = subagent_factory(root, name)
            for grandchild in grandchildren:
                subagent_factory(child, grandchild)
        return root

    return build


# --- The agent runtime -----------------------------------------------------------------------

import time  # noqa: E402

from agents.runtime.pool import AgentPool  # noqa: E402
from research.models import ACTIVE_STATUSES  # noqa: E402


@pytest.fixture
def agent_pool(transactional_db, scripted_llm):
    """A started agent pool of this process over the scripted LLM. Agents are threads, so the
    tests that use it see committed rows only (transactional_db)."""
    pool = AgentPool(max_active=8).start()
    yield pool
    pool.shutdown(timeout=10)


def wait_for(predicate: Callable[[], object], *, timeout: float = 20, message: str = "") -> object:
    """Poll until predicate() is truthy; fail with `message` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(message or f"timed out after {timeout}s waiting for {predicate}")


def statements_waiting_on_a_lock(starting: str = "") -> int:
    """How many statements of this test database wait on a lock (PostgreSQL), of those whose
    text starts with `starting`: the server is shared by the test workers' databases."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND starts_with(query, %s)",
            [starting],
        )
        return cursor.fetchone()[0]


def wait_finished(run: Run, *, timeout: float = 20) -> Run:
    """Wait until the run's whole tree has ended; return the run reloaded."""
    wait_for(
        lambda: not Run.objects.filter(root_id=run.root_id, status__in=ACTIVE_STATUSES).exists(),
        timeout=timeout,
        message=f"run {run.pk}'s tree did not end within {timeout}s",
    )
    run.refresh_from_db()
    return run


def demo_on_starter(owner: User, topic: str) -> Run:
    """A research started on the offline demo model over `owner`'s "Python reference" (the
    starter dataset, loaded here as `make run` loads it); not waited for."""
    from io import StringIO

    from django.core.management import call_command

    from research.models import Dataset

    call_command("load_starter_dataset", user=owner.username, stdout=StringIO())
    python = Dataset.objects.get(owner=owner, name="Python reference")
    return services.run_start(owner=owner, topic=topic, model="demo", dataset_id=python.pk)


# --- Real server processes -----------------------------------------------------------------

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent


from tests.servers import free_port, listening, spawn_daphne  # noqa: E402


def process_env(settings, **extra: str) -> dict[str, str]:
    """The environment of a server or worker process that shares this test's database."""
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "research.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "OPENAI_BASE_URL": settings.OPENAI_BASE_URL,
        "OPENAI_API_KEY": "test-key",
        "RESEARCH_MODEL": settings.RESEARCH_MODEL,
        "RESEARCH_MODEL_PRICES": '{"scripted": [1.0, 2.0]}',
        "READ_PAGE_ALLOWED_HOSTS": ",".join(settings.READ_PAGE_ALLOWED_HOSTS),
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra)
    return env


def manage_check(settings, **extra: str) -> subprocess.CompletedProcess:
    """`manage.py check` in a process of its own with `extra` in its environment: what
    startup refuses (a bad kind file, an unknown search provider) stops it, on stderr."""
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=PROJECT,
        env=process_env(settings, **extra),
        capture_output=True,
        text=True,
    )


@dataclass
class ServerProcess:
    process: subprocess.Popen
    url: str
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def start_daphne(settings, tmp_path: Path, **env: str) -> ServerProcess:
    port = free_port()
    log = tmp_path / f"daphne-{port}.log"
    process = spawn_daphne(port, env=process_env(settings, **env), output=log.open("w"))
    server = ServerProcess(process, f"http://127.0.0.1:{port}", log)

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"daphne exited:\n{server.output()}")
        return listening(port)

    wait_for(answers, timeout=30, message="daphne did not start")
    return server


@pytest.fixture
def daphne_server(transactional_db, scripted_llm, settings, tmp_path):
    """A real daphne serving the app (pages, API, websockets, and the agent pool) on this
    test's database and the scripted LLM."""
    server = start_daphne(settings, tmp_path)
    yield server
    server.stop()


# --- A browser's live socket -----------------------------------------------------------------

import json  # noqa: E402


def watch(web: ServerProcess, root_id: int, *, after: int, user: str = "alice"):
    """A browser's websocket on the live tree: the user's session cookie and the page's Origin."""
    import websockets.sync.client
    from django.test import Client

    browser = Client()
    assert browser.login(username=user, password=PASSWORD)
    return websockets.sync.client.connect(
        web.url.replace("http://", "ws://") + f"/ws/runs/{root_id}/?after={after}",
        origin=web.url,
        additional_headers={"Cookie": f"sessionid={browser.cookies['sessionid'].value}"},
        proxy=None,
    )


def receive_until_root_finished(socket, root_id: int, timeout: float = 30) -> list[dict]:
    """Every event until the root's run.finished, then whatever still arrives in half a
    second (live events from several agent threads may come slightly out of order)."""
    received: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = json.loads(socket.recv(timeout=deadline - time.monotonic()))
        received.append(event)
        if event["type"] == "run.finished" and event["run"] == root_id:
            break
    else:
        raise AssertionError(f"the root did not finish within {timeout}s: {received}")
    while True:
        try:
            received.append(json.loads(socket.recv(timeout=0.5)))
        except TimeoutError:
            return received


# --- Browser tests that fail say what their page showed ----------------------------------------

import re  # noqa: E402

from playwright.sync_api import Page  # noqa: E402

from tests.browsing import state_at_failure  # noqa: E402


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A browser test that failed gets a section with its page's address, title, text and a
    screenshot (/tmp/canopy-failures), read before the page fixture closes it."""
    report = yield
    page = getattr(item, "funcargs", {}).get("page")
    if report.when == "call" and report.failed and isinstance(page, Page):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", item.nodeid)[-150:]
        state = state_at_failure(page, Path("/tmp/canopy-failures"), name)
        report.sections.append(("the page when the test failed", state))
    return report


from django.db import connection  # noqa: E402


@pytest.fixture
def refused_step():
    """The database refuses a transcript step whose text is REFUSED, as a constraint would."""
    if connection.vendor == "postgresql":
        statements = [
            "CREATE FUNCTION canopy_refuse() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'this step is refused'; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER canopy_refuse BEFORE INSERT ON research_step FOR EACH ROW "
            "WHEN (NEW.output = 'REFUSED') EXECUTE FUNCTION canopy_refuse()",
        ]
        dropped = ["DROP TRIGGER canopy_refuse ON research_step", "DROP FUNCTION canopy_refuse"]
    else:
        statements = [
            "CREATE TRIGGER canopy_refuse BEFORE INSERT ON research_step "
            "WHEN NEW.output = 'REFUSED' BEGIN SELECT RAISE(ABORT, 'this step is refused'); END"
        ]
        dropped = ["DROP TRIGGER canopy_refuse"]
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
    yield
    with connection.cursor() as cursor:
        for statement in dropped:
            cursor.execute(statement)
