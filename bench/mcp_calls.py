"""What MCP costs, both ways, on this machine.

1. Canopy as an MCP server: an MCP client (the SDK's) against a real daphne on a temporary
   SQLite database: opening a session, and one `list_research` / `get_research` call in it.
2. Remote MCP tools: one `call_remote` (what an agent's remote tool call does: address
   guard, a new session, the call, closing it) against a local MCP server of the SDK, next
   to the same call in a session kept open (the floor a pooled session could reach).

    .venv/bin/python bench/mcp_calls.py --calls 50

It prints medians in milliseconds.
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from tests.servers import free_port, spawn_daphne, wait_listening  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="calls measured (50)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.environ.update(
            DJANGO_SETTINGS_MODULE="research.settings",
            DATABASE_URL=f"sqlite:///{folder}/bench.sqlite3",
            REDIS_URL="",
            RESEARCH_AGENTS_IN_WEB="false",
            REMOTE_MCP_ALLOWED_HOSTS="127.0.0.1",
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        figures = canopy_server(options.calls) | remote_tools(options.calls)
    for name, value in figures.items():
        print(f"{name:<55} {value:8.1f} ms")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def canopy_server(calls: int) -> dict[str, float]:
    import anyio
    import httpx2
    from django.contrib.auth.models import User
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from rest_framework.authtoken.models import Token

    from research import services

    user = User.objects.create_user("bench")
    key = Token.objects.create(user=user).key
    run = services.run_start(owner=user, topic="bench", model="demo")
    port = free_port()
    daphne = spawn_daphne(port)
    try:
        wait_listening(daphne, port)
        url = f"http://127.0.0.1:{port}/mcp"
        opened, listed, got = [], [], []

        async def measure() -> None:
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx2.AsyncClient(headers=headers) as http:
                for index in range(calls + 1):
                    started = time.perf_counter()
                    async with Client(streamable_http_client(url, http_client=http)) as client:
                        opened.append(time.perf_counter() - started)
                        if index:
                            for samples, name, arguments in (
                                (listed, "list_research", {}),
                                (got, "get_research", {"research_id": run.pk}),
                            ):
                                started = time.perf_counter()
                                answer = await client.call_tool(name, arguments)
                                samples.append(time.perf_counter() - started)
                                assert not answer.is_error, answer

        anyio.run(measure)
    finally:
        daphne.terminate()
        daphne.wait()
    return {
        "Canopy /mcp on daphne: open a session": median_ms(opened[1:]),
        "Canopy /mcp on daphne: list_research in a session": median_ms(listed),
        "Canopy /mcp on daphne: get_research in a session": median_ms(got),
    }


def remote_tools(calls: int) -> dict[str, float]:
    import anyio
    import uvicorn
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from agents.runtime.context import AgentContext, CancelToken
    from agents.tools.remote import call_remote
    from research.models import RemoteServer

    notes = MCPServer("notes", log_level="WARNING")

    @notes.tool()
    def lookup(topic: str) -> str:
        """Look up a note."""
        return f"note on {topic}"

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(notes.streamable_http_app(), port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/mcp"
    remote = RemoteServer(name="notes", url=url, headers={"X-Key": "secret"})
    ctx = AgentContext(
        run_id=0,
        root_id=0,
        parent_id=None,
        depth=0,
        name="",
        owner_id=0,
        model="demo",
        dataset_id=None,
        cancel=CancelToken(0, watched=True),
    )
    each, kept = [], []
    try:
        for _ in range(calls + 1):
            started = time.perf_counter()
            call_remote(
                ctx, remote, lambda client: client.call_tool("lookup", {"topic": "x"}), what="x"
            )
            each.append(time.perf_counter() - started)

        async def in_one_session() -> None:
            async with Client(url) as client:
                for _ in range(calls + 1):
                    started = time.perf_counter()
                    await client.call_tool("lookup", {"topic": "x"})
                    kept.append(time.perf_counter() - started)

        anyio.run(in_one_session)
    finally:
        server.should_exit = True
    return {
        "remote tool call (call_remote: guard, new session, call)": median_ms(each[1:]),
        "remote tool call in a session kept open": median_ms(kept[1:]),
    }


if __name__ == "__main__":
    main()
