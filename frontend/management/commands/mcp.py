"""`manage.py mcp --user NAME`: Canopy's MCP tools over stdio, for an MCP client that starts
the server itself (Claude Desktop, an IDE agent). Every tool acts as that one user.

stdout carries the protocol and nothing else: logs go to stderr. Researches started here run
where they would from the command line: in an agent process when one is up, else (with
RESEARCH_AGENTS_IN_WEB, the embedded default) in a pool of this process, which takes only the
researches this session started and interrupts them when the client closes the session.
"""

import logging

import anyio
from django.core.management.base import BaseCommand, CommandParser

from agents.hosting import LocalAgents
from frontend.terminal.users import resolve_user, user_help
from research import endings
from research.mcp_server.tools import build_server

log = logging.getLogger(__name__)

LOCAL_STOPPED = endings.MCP_SESSION_CLOSED
USER_HELP = user_help(
    "the user the MCP server acts for: its tools start and read that user's researches"
)


class Command(BaseCommand):
    help = "Serve Canopy's MCP tools over stdio to one MCP client, as one user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help=USER_HELP)

    def handle(self, *args, **options) -> None:
        user = resolve_user(options.get("user"), which="which user the MCP server acts for")
        agents = SessionAgents()
        server = build_server(owner_of=lambda ctx: user.pk, on_started=agents.take)
        try:
            anyio.run(server.run_stdio_async)
        finally:
            agents.shutdown()


class SessionAgents(LocalAgents):
    """The researches of this session run here when no agent process would: decided on the
    first research, then every one of the session runs in the same pool."""

    def __init__(self) -> None:
        super().__init__(reason=LOCAL_STOPPED)

    def take(self, run_id: int) -> bool:
        if self.pool is None and not self.needed():
            return False
        return super().take(run_id)
