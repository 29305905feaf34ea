"""A trace of what the agents of a daphne process do, by wall clock and thread CPU: put this
folder first on PYTHONPATH and name a file in TRACE_OUT, then run a benchmark that starts
daphne (bench/tree_timeline.py, bench/served.py). bench/trace_report.py reads the file.

    PYTHONPATH=bench/trace TRACE_OUT=/tmp/trace.json .venv/bin/python bench/tree_timeline.py
    .venv/bin/python bench/trace_report.py /tmp/trace.json
    TRACE_MORE=agents.tools.team.spawn:_record,agents.runtime.pool:AgentPool.submit ...

Python imports `sitecustomize` at every start, so this runs in every process started with
that PYTHONPATH; it does something only in a daphne process with TRACE_OUT set. Once the
project's modules are imported it wraps the functions of TRACED, each call noting its
thread, its start and end (time.time) and its thread's CPU (time.thread_time), and writes
them all to TRACE_OUT as JSON when the process ends. A function this version of the code does
not have is skipped, with a line on stderr (the daphne log of the benchmark). Round thirteen
of issue 25 found the children's wait before their acting tools this way
(docs/performance.md).
"""

import atexit
import functools
import importlib
import json
import os
import sys
import threading
import time

# (module, function or class, method or None): wrapped where they are looked up at call time.
TRACED = (
    ("research.api", "run_start", None),
    ("research.services", "run_claim", None),
    ("agents.loop.lifetime", "run_agent", None),
    ("agents.runtime.tree", "open_inbox", None),
    ("agents.loop.agent", "Agent", "__init__"),
    ("agents.loop.agent", "toolset", None),
    ("agents.loop.agent", "Agent", "run"),
    ("agents.loop.agent", "Agent", "_call_model"),
    ("agents.llm.openai_client", "OpenAIChat", "chat"),
    ("agents.loop.agent", "Agent", "_deliver_reports"),
    ("agents.loop.agent", "Agent", "_run_tools"),
    ("agents.loop.agent", "Agent", "_accepted"),
    ("agents.loop.records", "Records", "written"),
    ("agents.runtime.tree", "end_subagents", None),
    ("agents.runtime.tree", "close_inbox", None),
    ("agents.loop.lifetime", "_checked", None),
    ("agents.runtime.resilience", "record_end", None),
    ("research.services.writer", "Writer", "_write"),
    ("research.selectors.trees", "tree_snapshot", None),
)


def _more() -> list[tuple[str, str, str | None]]:
    """TRACE_MORE's functions, as "module:function" or "module:Class.method", comma separated:
    traced too, for a look closer than TRACED's."""
    more = []
    for entry in filter(None, os.environ.get("TRACE_MORE", "").split(",")):
        module_name, _, qualified = entry.strip().partition(":")
        name, _, method = qualified.partition(".")
        more.append((module_name, name, method or None))
    return more


def _cmdline() -> bytes:
    try:
        with open("/proc/self/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""


def _install(out: str) -> None:
    calls: list[tuple[str, str, float, float, float]] = []

    def traced(function, label):
        @functools.wraps(function)
        def call(*args, **kwargs):
            began, cpu = time.time(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                ended = time.time()
                thread = threading.current_thread().name
                calls.append((thread, label, began, ended, time.thread_time() - cpu))

        return call

    def wrap() -> None:
        while "agents.loop.lifetime" not in sys.modules or "research.api" not in sys.modules:
            time.sleep(0.05)
        for module_name, name, method in (*TRACED, *_more()):
            try:
                owner = importlib.import_module(module_name)
                if method is not None:
                    owner = getattr(owner, name)
                    name = method
                label = f"{owner.__name__}.{name}" if method else name
                setattr(owner, name, traced(getattr(owner, name), label))
            except (ImportError, AttributeError) as error:
                print(f"trace: {module_name} {name}: {error}", file=sys.stderr)

    def write() -> None:
        with open(out, "w") as file:
            json.dump(calls, file)

    threading.Thread(target=wrap, name="trace", daemon=True).start()
    atexit.register(write)


if os.environ.get("TRACE_OUT") and b"daphne" in _cmdline():
    _install(os.environ["TRACE_OUT"])
