"""Small helpers the agent tests share (fixtures are in conftest.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from research import services
from research.models import Run
from tests.conftest import PROJECT


def start(owner, topic, **kwargs) -> Run:
    return services.run_start(owner=owner, topic=topic, **kwargs)


def results(llm, match: str, name: str | None = None) -> list[str]:
    """The contents of the tool results the scripted model got for calls matching `match`."""
    return [m["content"] for m in llm.tool_results(match, name=name)]


def tool_names(request: dict) -> set[str]:
    """The names of the tools offered in one recorded model request."""
    return {tool["function"]["name"] for tool in request.get("tools") or []}


def on_fresh_sqlite(script: str, database: Path) -> Any:
    """Run `script` in a new Python process, Canopy on a SQLite file of its own (the embedded
    default, no Redis), and return what its last line printed, read as JSON. The script
    failing fails the test with its errors."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "DJANGO_SETTINGS_MODULE": "research.settings",
        "SECRET_KEY": "test",
        "REDIS_URL": "",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
