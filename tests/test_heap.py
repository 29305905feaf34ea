"""The startup heap is frozen out of the cyclic collector's walk (research.ops.heap): in the
web process once its URLconf is loaded, and in a process that runs agents once
prepare_process has imported the tools and the model client. Each check starts a Python
process of its own, as daphne and `runagents` start."""

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import PROJECT, process_env

pytestmark = pytest.mark.django_db  # the processes need the test database to exist

# An object is frozen when the collector tracks it but none of its generations holds it.
FROZEN = """
import gc

def frozen(obj):
    return gc.is_tracked(obj) and not any(other is obj for other in gc.get_objects())
"""


def _run(settings, code: str, **env: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", FROZEN + textwrap.dedent(code)],
        cwd=PROJECT,
        env=process_env(settings, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_web_process_freezes_its_startup_with_the_urlconf_loaded(settings):
    count, view_frozen, left = _run(
        settings,
        """
        import research.asgi
        from django.urls import resolve

        view = resolve("/").func  # a view the first request would otherwise have imported
        print(gc.get_freeze_count(), frozen(view), len(gc.get_objects()))
        """,
        RESEARCH_AGENTS_IN_WEB="false",
    )
    assert int(count) > 100_000
    assert view_frozen == "True"
    assert int(left) < int(count) / 10  # the collector walks a small part of the heap


def test_an_agent_process_freezes_what_its_warm_up_imported(settings):
    """As a worker starts (serve_as_worker) and the web process's warm-up thread runs."""
    count, client_frozen, agent_frozen = _run(
        settings,
        """
        import django

        django.setup()
        from agents import hosting

        before = gc.get_freeze_count()
        hosting.prepare_process()
        import openai
        from agents.loop.agent import Agent

        print(gc.get_freeze_count() - before, frozen(openai.OpenAI), frozen(Agent))
        """,
    )
    assert int(count) > 100_000
    assert (client_frozen, agent_frozen) == ("True", "True")


@pytest.mark.django_db(transaction=True)  # the web process's pool registers its worker row
def test_the_web_process_running_agents_freezes_its_warm_up_too(settings):
    count, client_frozen = _run(
        settings,
        """
        import threading

        import research.asgi

        for thread in threading.enumerate():
            if thread.name == "agents-warm-up":
                thread.join(60)
        import openai

        print(gc.get_freeze_count(), frozen(openai.OpenAI))
        """,
        RESEARCH_AGENTS_IN_WEB="true",
    )
    assert int(count) > 100_000
    assert client_frozen == "True"
