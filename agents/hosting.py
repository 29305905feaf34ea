"""Where agents run: the one place an agent pool is started.

Four processes host agents, each through one function here:
- the web process (daphne), for the embedded default: `serve_in_web_process`;
- a `manage.py runagents` worker: `serve_as_worker`;
- a command that runs the researches it started when no agent process is up (the CLI's
  `start --wait`, `manage.py mcp`): a `LocalAgents`, whose pool claims only the roots it is
  given and ends with the command.

The edges (research.asgi, frontend's commands) import this module, never the runtime.
"""

import atexit
import threading

from django.conf import settings

from agents.runtime.pool import AgentPool
from research import selectors, services
from research.ops import heap


def warm_up() -> None:
    """Import what every agent needs before this process claims anything.

    The tools and the model client take two to three seconds to import (trafilatura, the
    openai package and its lazily loaded resources): without this the first run a fresh
    worker claims waits for them, and looks stuck in `queued` meanwhile.
    """
    import agents.loop.agent  # noqa: F401
    import agents.tools.knowledge  # noqa: F401
    import agents.tools.pages  # noqa: F401
    import agents.tools.remote  # noqa: F401  (the MCP SDK: about three seconds)
    import agents.tools.web  # noqa: F401
    from agents.llm import DEMO_MODEL, chat_model_for

    if settings.RESEARCH_MODEL != DEMO_MODEL:
        chat_model_for(settings.RESEARCH_MODEL)  # builds the client and its chat resource


def prepare_process() -> None:
    """An agent process's start: warm_up, then what it imported, which lives as long as the
    process, is frozen out of the collector's walk (research.ops.heap)."""
    warm_up()
    heap.freeze_startup_heap()


_web_pool: AgentPool | None = None


def serve_in_web_process() -> AgentPool:
    """Start the web process's pool once; interrupt its agents when the process exits.

    daphne stops its reactor on SIGTERM and SIGINT and returns, so atexit runs while the
    database is still reachable.
    """
    global _web_pool
    if _web_pool is None:
        # Beside the server's start, not before it: pages are served meanwhile, and the first
        # research no longer waits for imports (see warm_up). Frozen then, with what is
        # alive meanwhile of the first requests and agents: bounded, and once.
        threading.Thread(target=prepare_process, name="agents-warm-up", daemon=True).start()
        _web_pool = AgentPool().start()
        atexit.register(_web_pool.shutdown)
    return _web_pool


def serve_as_worker(*, max_agents: int | None = None) -> AgentPool:
    """A `runagents` worker's pool: it claims queued roots; the command stops it."""
    prepare_process()
    return AgentPool(max_active=max_agents, claim_roots=True).start()


class LocalAgents:
    """The agents of researches this command started, run in this process when no agent
    process would run them: one pool, started on the first research that needs it, that
    claims only the roots it is given and is stopped with the command (their runs end with
    `reason`)."""

    def __init__(self, *, reason: str) -> None:
        self.reason = reason
        self.pool: AgentPool | None = None
        self._lock = threading.Lock()

    @staticmethod
    def needed() -> bool:
        """Whether no agent process would take a research now (the embedded setup)."""
        return settings.RESEARCH_AGENTS_IN_WEB and not selectors.agent_process_alive()

    def take(self, run_id: int) -> bool:
        """Run the root here; False when another process claimed it meanwhile."""
        with self._lock:
            if self.pool is None:
                self.pool = AgentPool(claim_roots=False).start()
            if not services.root_claim(run_id=run_id, worker_id=self.pool.worker_id):
                return False
            self.pool.submit(run_id)
            return True

    def shutdown(self, *, reason: str | None = None) -> None:
        # Short: agents still in a model call cannot see the cancel before it returns, and
        # they end with this process anyway (their runs are failed with the reason).
        if self.pool is not None:
            self.pool.shutdown(reason=reason or self.reason, timeout=3.0)


__all__ = ["LocalAgents", "prepare_process", "serve_as_worker", "serve_in_web_process", "warm_up"]
