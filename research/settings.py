"""Canopy settings: one module, typed environment variables, defaults for the embedded setup.

`make run` needs no variable at all: SQLite in the project folder, the in-memory channel
layer, and the offline demo model. Production sets DATABASE_URL, REDIS_URL and an LLM endpoint.
"""

import ipaddress
import json
import os
import secrets
from decimal import Decimal, InvalidOperation
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from research.ops.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

# A `.env` file (CANOPY_ENV_FILE, default `.env` in the project) fills in what the
# environment leaves unset: a variable set in the environment always wins over the file.
load_dotenv(os.environ.get("CANOPY_ENV_FILE") or BASE_DIR / ".env", override=False)


def env(name: str, default: str = "") -> str:
    """A variable's value; an empty one (`NAME=` in a .env file) is unset, as for the others."""
    return os.environ.get(name) or default


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None


def envdecimal(name: str, default: str) -> Decimal:
    """A Decimal (money): exact, unlike a float; "" or unset is the default."""
    value = os.environ.get(name) or default
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None
    if not number.is_finite():
        raise ImproperlyConfigured(f"{name} must be a finite number, not {value!r}")
    return number


def envlist(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env(name, default).split(",") if item.strip()]


def envrate(name: str, default: str) -> str:
    """A throttle rate, `N/second|minute|hour|day` (DRF's form); "off" or "" throttles nothing."""
    value = env(name, default).strip()
    if value.lower() in ("", "off"):
        return ""
    count, _, period = value.partition("/")
    if not count.isdigit() or int(count) < 1 or period not in _RATE_PERIODS:
        raise ImproperlyConfigured(
            f"{name} must look like 10/minute (per second, minute, hour or day) or off, "
            f"not {value!r}"
        )
    return value


_RATE_PERIODS = ("s", "sec", "second", "m", "min", "minute", "h", "hour", "d", "day")


def _secret_key() -> str:
    """SECRET_KEY from the environment, or a key generated once into an untracked file."""
    if key := env("SECRET_KEY"):
        return key
    path = BASE_DIR / ".secret_key"
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(50))
    return path.read_text().strip()


def _write_private(path: Path, text: str) -> None:
    """Write `path` readable by its owner only from its first byte, unless it exists.

    The key goes into a temporary file created with mode 0o600 (O_CREAT|O_EXCL), then is
    linked into place: a chmod afterwards would leave a moment where others could read it,
    and a process starting at the same moment sees either no file or the whole key, never
    an empty one. The first link wins; the others read its key.
    """
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink(missing_ok=True)


POSTGRESQL_ENGINE = "research.postgresql"  # Django's, with the pool's check of Canopy's own


# psycopg's default: a statement is prepared after its fifth run on a connection.
PREPARE_THRESHOLD = 5


def _database(url: str) -> dict:
    config = dj_database_url.parse(url)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # Agent threads write at once: WAL lets readers go on while one writes, IMMEDIATE
        # takes the write lock at BEGIN (no deadlock on lock upgrade) and the timeout waits
        # for it instead of failing with "database is locked".
        config["OPTIONS"] = {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    elif config["ENGINE"] == "django.db.backends.postgresql":
        # Dozens of agent threads each hold a connection while they work: a pool keeps
        # the number the server sees bounded. The pool needs CONN_MAX_AGE = 0.
        config["CONN_MAX_AGE"] = 0
        # The pool checks a connection when it is taken out: one the server ended meanwhile
        # (a restart, pg_terminate_backend) is replaced rather than failing the next query.
        # The check is research.postgresql's, which asks the socket before it asks the
        # server (Django's CONN_HEALTH_CHECKS installs psycopg_pool's round trip instead).
        config["ENGINE"] = POSTGRESQL_ENGINE
        server_side_binding = envbool("DATABASE_SERVER_SIDE_BINDING", True)
        config["OPTIONS"] = {
            # A process frozen inside a transaction would hold its tree's lock for ever and
            # block every other process's sweep; the server ends such a session instead.
            "options": "-c idle_in_transaction_session_timeout=60000",
            # Parameters sent apart from the statement (PostgreSQL's binding), not quoted
            # into its text one by one in Python: that quoting was about 8% of a research's
            # CPU (issue 25). A statement a connection has run 5 times is then prepared:
            # the server parses and plans it once per connection, not on every run (Django
            # turns psycopg's preparing off unless it is asked for). `false` turns off both,
            # for a pooler that cannot keep prepared statements.
            "server_side_binding": server_side_binding,
            "prepare_threshold": PREPARE_THRESHOLD if server_side_binding else None,
            "pool": {
                "min_size": 1,
                "max_size": envint("DATABASE_POOL_SIZE", 40),
                "timeout": 30,
            },
        }
    return config


DEBUG = envbool("DEBUG", False)
SECRET_KEY = _secret_key()
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django_prometheus",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "channels",
    "research",
    "agents",
    "frontend",
]

MIDDLEWARE = [
    # First and last: django-prometheus times each request between the two.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "research.ops.static.StaticFilesMiddleware",  # ServeStatic's, async (research/ops/http.py)
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "frontend.not_allowed.ActionAddressMiddleware",  # a page for an action's address
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "research.urls"
ASGI_APPLICATION = "research.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.words.words",
            ],
        },
    },
]

DATABASE_URL = env("DATABASE_URL", f"sqlite:///{BASE_DIR / 'canopy.sqlite3'}")
DATABASES = {"default": _database(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env("REDIS_URL")
CHANNEL_REDIS_READ_SECONDS = 15.0
# With Redis, events reach the web processes by Redis's pub/sub (one PUBLISH per message,
# pushed to every process that follows the tree, which hands it to its sockets), or with
# "lists" by channels_redis's default layer (a list per consumer, read by a blocking pop a
# message at a time). Under load the lists' reads fell a second behind (bench/served.py
# --quick: event p99 0.4 to 1.4 s against 57 to 65 ms, docs/performance.md). Pub/sub keeps
# nothing for a process that is not listening: the database is the record, and a push that
# failed is sent again (frontend.delivery).
REDIS_CHANNEL_LAYER = env("REDIS_CHANNEL_LAYER", "pubsub")
if REDIS_CHANNEL_LAYER not in ("pubsub", "lists"):
    raise ImproperlyConfigured(
        f"REDIS_CHANNEL_LAYER must be pubsub or lists, not {REDIS_CHANNEL_LAYER!r}."
    )
if REDIS_URL and REDIS_CHANNEL_LAYER == "pubsub":
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL}]},
        }
    }
elif REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 gives every connection a 5 s socket timeout, the length of
                # channels_redis's blocking receive (BZPOPMIN, 5 s): a socket with nothing to
                # say for 5 s was torn down with 1011 (channels_redis#422). The read waits
                # longer than the blocking pop, and still notices a Redis that went away.
                "hosts": [{"address": REDIS_URL, "socket_timeout": CHANNEL_REDIS_READ_SECONDS}],
                "capacity": 1000,
                "expiry": 60,
            },
        }
    }
else:
    # Channels' in-memory layer, without its per-message tasks, copies and sweeps.
    CHANNEL_LAYERS = {"default": {"BACKEND": "frontend.layers.LocalChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Django's database sessions, read by a statement built once (research/auth.py).
SESSION_ENGINE = "research.auth"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env("STATIC_ROOT") or BASE_DIR / "staticfiles")
# Hashed names and ServeStatic: see research/ops/static.py.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "research.ops.static.StaticStorage"},
}
SERVESTATIC_USE_FINDERS = True
SERVESTATIC_USE_MANIFEST = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: an unauthenticated request then gets 401 with WWW-Authenticate.
        "research.auth.TokenAuthentication",  # DRF's, its query built once
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON with a limit on nesting (a 1,000-deep body was a RecursionError, a 500).
    "DEFAULT_PARSER_CLASSES": [
        "research.parsers.DepthLimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # JSON only: the explorer at /v1/docs is the API's page. DRF's browsable API needs
    # inline styles the Content Security Policy refuses.
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "research.schema.CanopyAutoSchema",
    "EXCEPTION_HANDLER": "research.api.exception_handler",
    # Behind N reverse proxies, the client address is the Nth from the right of
    # X-Forwarded-For; with none (0), REMOTE_ADDR, so a client cannot pick its own address.
    "NUM_PROXIES": envint("NUM_PROXIES", 0),
}
# Throttles (research/ops/throttles.py): per user, or per address when signed out.
THROTTLE_RATES = {
    "research_start": envrate("THROTTLE_RESEARCH_START", "30/hour"),
    "uploads": envrate("THROTTLE_UPLOADS", "120/hour"),
    "knowledge_queries": envrate("THROTTLE_KNOWLEDGE_QUERIES", "60/minute"),
    "notes": envrate("THROTTLE_NOTES", "60/minute"),
    "exports": envrate("THROTTLE_EXPORTS", "60/hour"),
    "login": envrate("THROTTLE_LOGIN", "10/minute"),
}
# The cache holds the throttles' counters: Redis, when there is one, so that every web
# process counts the same requests. A Redis that does not answer in a second counts as down
# (research/ops/throttles.py says what each throttle then does), not a request left hanging.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
    | {"KEY_PREFIX": "canopy"}
}
SPECTACULAR_SETTINGS = {
    # The explorer's files come from this server (drf-spectacular-sidecar), not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "TITLE": "Canopy API",
    "DESCRIPTION": "Deep research with a live tree of agents.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # A run's status and a plan item's share the field name "status": each its own name, or
    # drf-spectacular names the run's after a hash ("Status267Enum") and warns.
    "ENUM_NAME_OVERRIDES": {"RunStatusEnum": "research.models.Status"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "research.schema.add_bounds",
    ],
}

# /healthz: how long each part (database, Redis, agents) may take to answer.
HEALTH_TIMEOUT_SECONDS = envfloat("HEALTH_TIMEOUT_SECONDS", 5.0)

# /metrics: a scraper sends `Authorization: Bearer <METRICS_TOKEN>` or scrapes from one of
# METRICS_ALLOWED_IPS (addresses or networks, comma-separated; loopback only by default).
# A forwarded request (X-Forwarded-For, Forwarded, X-Real-IP) is judged by the client that
# NUM_PROXIES picks from X-Forwarded-For, never by the proxy's address; with NUM_PROXIES=0
# it gets in with the token only (research/ops/metrics.py).
METRICS_TOKEN = env("METRICS_TOKEN")
METRICS_ALLOWED_IPS = envlist("METRICS_ALLOWED_IPS", "127.0.0.1,::1")
try:
    METRICS_ALLOWED_NETWORKS = [
        ipaddress.ip_network(item, strict=False) for item in METRICS_ALLOWED_IPS
    ]
except ValueError as error:
    raise ImproperlyConfigured(f"METRICS_ALLOWED_IPS: {error}") from None

# Content Security Policy (django-csp): scripts, styles and connections from this origin
# only; no inline script or style, no third-party origin, no framing.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

LOG_FORMAT = env("LOG_FORMAT", "text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, not {LOG_FORMAT!r}")
LOGGING = logging_config(level=env("LOG_LEVEL", "INFO"), json_lines=LOG_FORMAT == "json")

# --- The LLM -----------------------------------------------------------------------------

OPENAI_BASE_URL = env("OPENAI_BASE_URL")
OPENAI_API_KEY = env("OPENAI_API_KEY")
# No key and no endpoint: the offline demo model, so a fresh machine shows the product.
RESEARCH_DEMO_MODE = not (OPENAI_BASE_URL or OPENAI_API_KEY)
RESEARCH_MODEL = env("RESEARCH_MODEL", "demo" if RESEARCH_DEMO_MODE else "gpt-4o-mini")
LLM_TIMEOUT_SECONDS = envfloat("LLM_TIMEOUT_SECONDS", 120.0)
LLM_MAX_RETRIES = envint("LLM_MAX_RETRIES", 2)

try:
    RESEARCH_MODEL_PRICES = json.loads(env("RESEARCH_MODEL_PRICES", "{}"))
    if not isinstance(RESEARCH_MODEL_PRICES, dict):
        raise ValueError("not an object")
    RESEARCH_MODEL_PRICES = {
        str(name): (Decimal(str(price[0])), Decimal(str(price[1])))
        for name, price in RESEARCH_MODEL_PRICES.items()
    }
except (ValueError, TypeError, IndexError, ArithmeticError) as error:
    raise ImproperlyConfigured(
        f'RESEARCH_MODEL_PRICES must be a JSON object like {{"my-model": [0.15, 0.6]}}: {error}'
    ) from None

# --- Research runs and agents ---------------------------------------------------------------

RESEARCH_MAX_WORKING_ROOTS = envint("RESEARCH_MAX_WORKING_ROOTS", 3)
# The library's search reads a topic's first 4,000 characters (selectors.runs.SEARCHED_TASK_CHARS):
# past that, a longer topic is found by its start and its report.
RESEARCH_TOPIC_MAX_CHARS = envint("RESEARCH_TOPIC_MAX_CHARS", 2000)
RESEARCH_DEFAULT_MAX_STEPS = envint("RESEARCH_DEFAULT_MAX_STEPS", 10)
RESEARCH_MAX_STEPS_LIMIT = envint("RESEARCH_MAX_STEPS_LIMIT", 40)
RESEARCH_MAX_AGENTS = envint("RESEARCH_MAX_AGENTS", 8)
# Of those, how many run Canopy's own Python at once (the others wait on a model or a tool).
RESEARCH_AGENT_CPU_SLOTS = envint("RESEARCH_AGENT_CPU_SLOTS", 2 * (os.cpu_count() or 1))
RESEARCH_AGENTS_IN_WEB = envbool("RESEARCH_AGENTS_IN_WEB", True)
# Group commit (research/services/writer.py): how long a batch of step records waits for more
# after its oldest, in milliseconds. Longer: fewer commits, events pushed that much later; 0
# writes each record as soon as the writer is free. A wait on a record never lingers, but a
# sub-agent's wait for its end does, for its parent's end to join it (agents.loop.lifetime):
# its thread and its slot are held that long.
RESEARCH_WRITER_LINGER_MS = envfloat("RESEARCH_WRITER_LINGER_MS", 3.0)
RESEARCH_STEP_RESULT_MAX_CHARS = envint("RESEARCH_STEP_RESULT_MAX_CHARS", 4000)
RESEARCH_TOOL_RESULT_MAX_CHARS = envint("RESEARCH_TOOL_RESULT_MAX_CHARS", 12000)
# Limits that say so (issue 16): a model's answer and a report are cut here, the cut marked;
# list items carry the report's first characters; a websocket frame stays under the server's
# limit (daphne's is 1 MiB), large reports going by REST instead.
RESEARCH_REPORT_MAX_CHARS = envint("RESEARCH_REPORT_MAX_CHARS", 100_000)
RESEARCH_LIST_REPORT_CHARS = envint("RESEARCH_LIST_REPORT_CHARS", 500)
RESEARCH_WS_MAX_FRAME_BYTES = envint("RESEARCH_WS_MAX_FRAME_BYTES", 512 * 1024)
# Independent reads of one model turn (searches, pages, queries) run at once, this many at most.
RESEARCH_PARALLEL_TOOL_CALLS = envint("RESEARCH_PARALLEL_TOOL_CALLS", 4)
if RESEARCH_AGENT_CPU_SLOTS < 1:
    raise ImproperlyConfigured(
        f"RESEARCH_AGENT_CPU_SLOTS must be 1 or more, not {RESEARCH_AGENT_CPU_SLOTS}"
    )
if not 0 <= RESEARCH_WRITER_LINGER_MS <= 1000:
    raise ImproperlyConfigured(
        f"RESEARCH_WRITER_LINGER_MS must be from 0 to 1000, not {RESEARCH_WRITER_LINGER_MS}"
    )
if RESEARCH_PARALLEL_TOOL_CALLS < 1:
    raise ImproperlyConfigured(
        f"RESEARCH_PARALLEL_TOOL_CALLS must be 1 or more, not {RESEARCH_PARALLEL_TOOL_CALLS}"
    )
RESEARCH_CANCEL_POLL_SECONDS = envfloat("RESEARCH_CANCEL_POLL_SECONDS", 0.25)
# An agent pool's cancel watch reads its agents' flags when a cancel or a note is announced
# (research/ops/wakeups.py; on PostgreSQL from any process, by NOTIFY), and this often for
# one no announcement told of. SQLite has no NOTIFY: a cancel from another process (the CLI)
# waits for this look, so it is as often as an agent on its own reads its flag.
RESEARCH_CANCEL_WATCH_SECONDS = envfloat(
    "RESEARCH_CANCEL_WATCH_SECONDS",
    2.0 if DATABASES["default"]["ENGINE"] == POSTGRESQL_ENGINE else RESEARCH_CANCEL_POLL_SECONDS,
)
RESEARCH_HEARTBEAT_SECONDS = envfloat("RESEARCH_HEARTBEAT_SECONDS", 5.0)
RESEARCH_WORKER_DEAD_SECONDS = envfloat("RESEARCH_WORKER_DEAD_SECONDS", 30.0)
# Issue 26: a research whose worker stopped (SIGTERM, after the agents finish the step they
# are in within `runagents --shutdown-timeout`) or died is resumed from its checkpoints and
# taken up by another worker. Off by default: seed 000's contract, where an interrupted run
# ends failed, is what a plain install does. A research is resumed so at most this often.
RESEARCH_RESUME_INTERRUPTED = envbool("RESEARCH_RESUME_INTERRUPTED", False)
RESEARCH_RESUME_MAX_AUTOMATIC = envint("RESEARCH_RESUME_MAX_AUTOMATIC", 3)
# Idle workers on PostgreSQL wake on a NOTIFY when a root is queued (research/ops/
# wakeups.py), and this poll only catches what no notification announced. SQLite has no
# NOTIFY: a root queued by another process (the CLI, an MCP client) waits for the poll.
RESEARCH_CLAIM_POLL_SECONDS = envfloat(
    "RESEARCH_CLAIM_POLL_SECONDS",
    10.0 if DATABASES["default"]["ENGINE"] == POSTGRESQL_ENGINE else 1.0,
)

# Sub-agents (seed 000's limits, as settings).
RESEARCH_SUBAGENTS_ENABLED = envbool("RESEARCH_SUBAGENTS_ENABLED", True)
RESEARCH_MAX_SUBAGENTS_PER_AGENT = envint("RESEARCH_MAX_SUBAGENTS_PER_AGENT", 5)
RESEARCH_MAX_SUBAGENTS_PER_TREE = envint("RESEARCH_MAX_SUBAGENTS_PER_TREE", 10)
RESEARCH_MAX_SUBAGENT_DEPTH = envint("RESEARCH_MAX_SUBAGENT_DEPTH", 2)
RESEARCH_INBOX_SIZE = envint("RESEARCH_INBOX_SIZE", 64)
RESEARCH_MESSAGE_MAX_CHARS = envint("RESEARCH_MESSAGE_MAX_CHARS", 10000)
RESEARCH_WAIT_SLICE_SECONDS = envfloat("RESEARCH_WAIT_SLICE_SECONDS", 300.0)
RESEARCH_SUBAGENT_TIMEOUT_SECONDS = envfloat("RESEARCH_SUBAGENT_TIMEOUT_SECONDS", 1800.0)
RESEARCH_TREE_COST_CAP_USD = envdecimal("RESEARCH_TREE_COST_CAP_USD", "0")
RESEARCH_DUPLICATE_TASK_SIMILARITY = envfloat("RESEARCH_DUPLICATE_TASK_SIMILARITY", 0.85)
RESEARCH_MESSENGER = env("RESEARCH_MESSENGER", "redis" if REDIS_URL else "memory")

# Sub-agent kinds (issue 13): prompts/agents/<kind>.md are built in; an admin adds kinds as
# Markdown files with YAML front matter in this folder (see agents.kinds).
RESEARCH_AGENT_KINDS_DIR = env("RESEARCH_AGENT_KINDS_DIR")
# Model tiers a parent picks for a sub-agent, e.g. {"high": "gpt-4.1", "low": "gpt-4.1-mini"}:
# the child's model comes from here, never from a name the parent writes. Empty: children run
# on their parent's model. Every tier's model needs a price (checked at startup).
try:
    RESEARCH_MODEL_TIERS = json.loads(env("RESEARCH_MODEL_TIERS", "{}"))
    if not isinstance(RESEARCH_MODEL_TIERS, dict) or not all(
        isinstance(model, str) and model for model in RESEARCH_MODEL_TIERS.values()
    ):
        raise ValueError("not an object of tier names to model names")
except ValueError as error:
    raise ImproperlyConfigured(
        f'RESEARCH_MODEL_TIERS must be a JSON object like {{"high": "gpt-4.1"}}: {error}'
    ) from None
# How many children of one parent work at once; the others wait for a slot (seed 001 runs 4).
RESEARCH_MAX_WORKING_CHILDREN = envint("RESEARCH_MAX_WORKING_CHILDREN", 5)
# A root's run-time cap, and the time kept for it to write its report: sub-agents run within
# the root's remaining time minus the reserve (seed 001). 0: no cap.
RESEARCH_ROOT_TIMEOUT_SECONDS = envfloat("RESEARCH_ROOT_TIMEOUT_SECONDS", 3600.0)
RESEARCH_WRITING_RESERVE_SECONDS = envfloat("RESEARCH_WRITING_RESERVE_SECONDS", 600.0)
# The lead's plan (issue 14): at most this many items. Verification: before the report is
# final, a verifier sub-agent checks the draft against the sources it cites.
RESEARCH_PLAN_MAX_ITEMS = envint("RESEARCH_PLAN_MAX_ITEMS", 10)
RESEARCH_VERIFY_REPORTS = envbool("RESEARCH_VERIFY_REPORTS", True)
if (
    RESEARCH_ROOT_TIMEOUT_SECONDS
    and RESEARCH_WRITING_RESERVE_SECONDS >= RESEARCH_ROOT_TIMEOUT_SECONDS
):
    raise ImproperlyConfigured(
        f"RESEARCH_WRITING_RESERVE_SECONDS ({RESEARCH_WRITING_RESERVE_SECONDS:g}) must be less "
        f"than RESEARCH_ROOT_TIMEOUT_SECONDS ({RESEARCH_ROOT_TIMEOUT_SECONDS:g}): the reserve "
        "is the end of a research's time kept for writing its report"
    )
if RESEARCH_MAX_WORKING_CHILDREN < 1:
    raise ImproperlyConfigured(
        f"RESEARCH_MAX_WORKING_CHILDREN must be 1 or more, not {RESEARCH_MAX_WORKING_CHILDREN}"
    )
# Callbacks: a signed POST to a research's callback_url when it ends, retried with backoff.
CALLBACK_SIGNING_SECRET = env("CALLBACK_SIGNING_SECRET")  # unset: derived from SECRET_KEY
CALLBACK_MAX_ATTEMPTS = envint("CALLBACK_MAX_ATTEMPTS", 8)
CALLBACK_RETRY_BASE_SECONDS = envfloat("CALLBACK_RETRY_BASE_SECONDS", 10.0)
CALLBACK_TIMEOUT_SECONDS = envfloat("CALLBACK_TIMEOUT_SECONDS", 10.0)
CALLBACK_POLL_SECONDS = envfloat("CALLBACK_POLL_SECONDS", 1.0)
CALLBACK_CA_BUNDLE = env("CALLBACK_CA_BUNDLE")  # a CA file to trust besides the system's

# PDF exports are printed by this Chromium (Debian's package), through Playwright.
PDF_CHROMIUM_PATH = env("PDF_CHROMIUM_PATH", "/usr/bin/chromium")
# Each PDF runs a Chromium (about a second and 100 MB): a web process prints this many at
# once, and one user holds at most EXPORT_PDF_PER_USER of them (past it, a 429 at once).
EXPORT_PDF_SLOTS = envint("EXPORT_PDF_SLOTS", 2)
EXPORT_PDF_PER_USER = envint("EXPORT_PDF_PER_USER", 1)
if not 1 <= EXPORT_PDF_PER_USER <= EXPORT_PDF_SLOTS:
    raise ImproperlyConfigured("EXPORT_PDF_PER_USER must be between 1 and EXPORT_PDF_SLOTS")

# --- Research tools ------------------------------------------------------------------------

SEARCH_PROVIDER = env("SEARCH_PROVIDER")
SEARXNG_URL = env("SEARXNG_URL")
TAVILY_API_KEY = env("TAVILY_API_KEY")
BRAVE_API_KEY = env("BRAVE_API_KEY")
SEARCH_TIMEOUT_SECONDS = envfloat("SEARCH_TIMEOUT_SECONDS", 15.0)
# The model the `openai` search provider asks, with OpenAI's web search tool.
SEARCH_OPENAI_MODEL = env("SEARCH_OPENAI_MODEL", "gpt-4.1-mini")
READ_PAGE_MAX_BYTES = envint("READ_PAGE_MAX_BYTES", 5 * 1024 * 1024)
READ_PAGE_TIMEOUT_SECONDS = envfloat("READ_PAGE_TIMEOUT_SECONDS", 20.0)
# Hosts read_page may fetch even though they resolve to private or loopback addresses.
READ_PAGE_ALLOWED_HOSTS = envlist("READ_PAGE_ALLOWED_HOSTS")

# Remote MCP servers (admin, "Remote MCP servers"): their URLs pass read_page's address guard
# unless their host is listed here; a call, and loading a tool list, give up after the timeout;
# an agent reloads a server's tool list when the one it has is older than the catalog age.
REMOTE_MCP_ALLOWED_HOSTS = envlist("REMOTE_MCP_ALLOWED_HOSTS")
REMOTE_MCP_TIMEOUT_SECONDS = envfloat("REMOTE_MCP_TIMEOUT_SECONDS", 60.0)
REMOTE_MCP_CATALOG_SECONDS = envfloat("REMOTE_MCP_CATALOG_SECONDS", 300.0)
