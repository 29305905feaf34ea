"""`manage.py mcp --user NAME`: Canopy's MCP tools over stdio, for an MCP client that starts
the server itself (Claude Desktop, an IDE agent). Every tool acts as that one user.

stdout carries the protocol and nothing else: logs go to stderr. Researches started here run
where they would from the command line: in an agent process when one is up, else (with
RESEARCH_AGENTS_IN_WEB, the embedded default) in a pool of this process, which takes only the
researches this session started and interrupts them when the client closes the session.
"""

import logging
import threading

import anyio
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from agents.runtime.pool import AgentPool
from frontend.terminal.users import USER_HELP, resolve_user
from research import endings, selectors, services
from research.mcp_server.tools import build_server

log = logging.getLogger(__name__)

LOCAL_STOPPED = endings.MCP_SESSION_CLOSED


class Command(BaseCommand):
    help = "Serve Canopy's MCP tools over stdio to one MCP client, as one user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help=USER_HELP)

    def handle(self, *args, **options) -> None:
        user = resolve_user(options.get("user"))
        agents = LocalAgents()
        server = build_server(owner_of=lambda ctx: user.pk, on_started=agents.take)
        try:
            anyio.run(server.run_stdio_async)
        finally:
            agents.shutdown()


class LocalAgents:
    """Runs the researches of this session when no agent process would: one pool, started
    on the first research that needs it, that claims only the roots it is given."""

    def __init__(self) -> None:
        self.pool: AgentPool | None = None
        self._lock = threading.Lock()

    def take(self, run_id: int) -> None:
        with self._lock:
            if self.pool is None:
                if not settings.RESEARCH_AGENTS_IN_WEB or selectors.agent_process_alive():
                    return
                self.pool = AgentPool(claim_roots=False).start()
            if services.root_claim(run_id=run_id, worker_id=self.pool.worker_id):
                self.pool.submit(run_id)

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(reason=LOCAL_STOPPED, timeout=3.0)
