"""research.settings, plus a log of every SQL statement and commit, for
`bench/research_cpu.py --statements`.

The benchmark starts daphne with DJANGO_SETTINGS_MODULE=statement_settings (bench/ on the
path) and CANOPY_STATEMENT_LOG=<file>. Every database connection of every thread gets an
execute wrapper that appends one line per statement to that file: its shape (whitespace
collapsed, `IN (%s, %s, ...)` lists and savepoint names folded), and a line `-- commit` per
transaction the server commits: each atomic block's commit, and each statement run outside
one (the server commits it on its own). The benchmark reads the lines a research added.

CANOPY_STATEMENT_CALLERS=<regex>: a statement whose shape matches it carries, after ` <- `,
the project's frames that ran it (innermost first), to find who asks for it.
"""

import os
import re
import traceback
from pathlib import Path

from django.db.backends.signals import connection_created

from research.settings import *  # noqa: F403

_LOG = os.environ.get("CANOPY_STATEMENT_LOG")
_PLACEHOLDERS = re.compile(r"%s(?:, %s)+")
_VALUES = re.compile(r"\(%s(?:, %s)*\)(?:, \(%s(?:, %s)*\))+")
_SAVEPOINT = re.compile(r'"s\d+_x\d+"')
_CALLERS = (
    re.compile(os.environ["CANOPY_STATEMENT_CALLERS"])
    if os.environ.get("CANOPY_STATEMENT_CALLERS")
    else None
)
_PROJECT = str(BASE_DIR)  # noqa: F405


def shape(sql: str) -> str:
    text = " ".join(sql.split())
    text = _VALUES.sub("(...), ...", text)
    text = _SAVEPOINT.sub('"s…"', text)
    return _PLACEHOLDERS.sub("%s, ...", text)


def _write(line: str) -> None:
    # O_APPEND: each line goes out whole, whichever thread writes it.
    os.write(_fd, (line.replace("\n", " ") + "\n").encode())


def _callers() -> str:
    frames = [
        f"{Path(frame.filename).stem}.{frame.name}"
        for frame in reversed(traceback.extract_stack()[:-3])
        if frame.filename.startswith(_PROJECT) and "/.venv/" not in frame.filename
    ]
    return " < ".join(frames[:6])


def _install(sender, connection, **kwargs) -> None:
    if getattr(connection, "_statement_log", False):
        return
    connection._statement_log = True

    def logged(execute, sql, params, many, context):
        text = shape(sql)
        if _CALLERS is not None and _CALLERS.search(text):
            text += " <- " + _callers()
        _write(text)
        if not connection.in_atomic_block and not sql.startswith(("BEGIN", "SAVEPOINT")):
            _write("-- commit")
        return execute(sql, params, many, context)

    commit = connection.commit

    def counted_commit() -> None:
        _write("-- commit")
        commit()

    connection.execute_wrappers.append(logged)
    connection.commit = counted_commit


if _LOG:
    _fd = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    connection_created.connect(_install)
