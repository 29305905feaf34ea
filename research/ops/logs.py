"""One log format for every process: time, level, logger, the run and root a line is about,
and never a secret.

The agent loop binds the run it works on (`bind_run`); every line its thread logs after
that carries `run=<id> root=<id>`. `LOG_FORMAT=json` writes one JSON object a line for a
log shipper instead of text. Whatever a line says, the values of the configured secrets
(API keys, tokens, the secret key) and the value of an Authorization header are replaced
by `[redacted]` before it is written: a library that logs a request or an exception that
quotes a URL must not leak a key into the logs.
"""

import contextvars
import json
import logging
import re
from datetime import UTC, datetime

from django.conf import settings

_run: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "canopy_run", default=None
)

REDACTED = "[redacted]"
# A setting whose name says it holds a secret; its value is never logged.
SECRET_SETTING = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)S?$|^SECRET_KEY_FALLBACKS$")
# Credentials that may appear in a line whatever the settings: headers and URL parameters.
CREDENTIAL = re.compile(
    r"(?i)(\b(?:authorization|x-api-key|x-subscription-token|api[-_]?key|token|secret"
    r"|password)\b[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|token|basic)\s+)?[^\s\"'&,;)}\]]+"
)


def bind_run(*, run_id: int, root_id: int) -> None:
    """Tag every line this thread (or task) logs from now on with the run and its root."""
    _run.set((run_id, root_id))


def bound_run() -> tuple[int, int] | None:
    return _run.get()


def configured_secrets() -> list[str]:
    """The values of every setting named like a secret, longest first (so a key that
    contains another is replaced whole)."""
    values: set[str] = set()
    for name in dir(settings):
        if not name.isupper() or not SECRET_SETTING.search(name):
            continue
        value = getattr(settings, name, None)
        items = value if isinstance(value, list | tuple) else [value]
        values.update(item for item in items if isinstance(item, str) and len(item) >= 6)
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return CREDENTIAL.sub(lambda match: match.group(1) + REDACTED, text)


class RunContextFilter(logging.Filter):
    """Adds `run_id` and `root_id` (None outside an agent) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _run.get()
        record.run_id, record.root_id = bound if bound else (None, None)
        return True


class CanopyFormatter(logging.Formatter):
    """`2026-12-01T06:00:00.123Z INFO agents.loop run=4 root=1: message`, or a JSON object
    with the same fields (`json_lines=True`); secrets redacted either way."""

    def __init__(self, *, json_lines: bool = False) -> None:
        super().__init__()
        self.json_lines = json_lines
        self._secrets: list[str] | None = None

    def secrets(self) -> list[str]:
        # Read once settings are ready: the formatter is built while they are loading.
        if self._secrets is None:
            self._secrets = configured_secrets() if settings.configured else []
        return self._secrets

    def format(self, record: logging.LogRecord) -> str:
        time = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        time = time.replace("+00:00", "Z")
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message}\n{record.exc_text}"
        if record.stack_info:
            message = f"{message}\n{self.formatStack(record.stack_info)}"
        message = redact(message, self.secrets())
        run_id = getattr(record, "run_id", None)
        root_id = getattr(record, "root_id", None)
        if self.json_lines:
            fields = {"time": time, "level": record.levelname, "logger": record.name}
            if run_id is not None:
                fields.update(run_id=run_id, root_id=root_id)
            fields["message"] = message
            return json.dumps(fields, ensure_ascii=False)
        ids = f" run={run_id} root={root_id}" if run_id is not None else ""
        return f"{time} {record.levelname} {record.name}{ids}: {message}"


def logging_config(*, level: str, json_lines: bool) -> dict:
    """The LOGGING setting: one console handler with Canopy's filter and formatter."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"run": {"()": RunContextFilter}},
        "formatters": {"canopy": {"()": CanopyFormatter, "json_lines": json_lines}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "filters": ["run"],
                "formatter": "canopy",
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.channels.server": {"level": "WARNING"},
            "httpx": {"level": "WARNING"},
            "httpx2": {"level": "WARNING"},  # the MCP SDK's HTTP client: a line per request
            "mcp": {"level": "WARNING"},
            "openai": {"level": "WARNING"},
        },
    }


def route_daphne_access_log() -> None:
    """daphne writes its access log straight to stdout, in its own format, past `logging`:
    send each entry through the `daphne.access` logger instead, so it has Canopy's format
    (JSON lines included) and its redaction."""
    from daphne.access import AccessLogGenerator

    access = logging.getLogger("daphne.access")

    def write_entry(self, host, date, request, status=None, length=None, ident=None, user=None):
        access.info('%s "%s" %s %s', host, request, status or "-", length or "-")

    AccessLogGenerator.write_entry = write_entry
