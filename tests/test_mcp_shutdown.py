"""A stop signal stops a process that served MCP tool calls, within its grace period: daphne
after a call over HTTP (its agent pool's exit hook runs), and `manage.py mcp` over stdio on
SIGTERM and on the end of its input."""

import json
import signal
import subprocess
import sys
import time

import pytest
from rest_framework.authtoken.models import Token

from research.models import Worker
from tests.conftest import PROJECT, process_env, start_daphne
from tests.test_mcp_server import http_session, result

# Well inside a container's grace period (Kubernetes: 30 s, systemd: 90 s); the pool's own
# shutdown waits up to 10 s for agents, and none works in these tests.
STOP_SECONDS = 8


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_daphne_stops_on_sigterm_after_an_mcp_tool_call(
    transactional_db, scripted_llm, settings, tmp_path, alice, mode
):
    server = start_daphne(settings, tmp_path)
    try:
        key = Token.objects.create(user=alice).key

        async def one_call(client) -> dict:
            return result(await client.call_tool("list_research", {}))

        assert http_session(f"{server.url}/mcp", key, one_call, mode=mode)["researches"] == []
        server.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        server.process.wait(timeout=STOP_SECONDS)
        assert time.monotonic() - started < STOP_SECONDS
        # The pool's exit hook ran: this process no longer counts as a live worker.
        assert not Worker.objects.filter(stopped_at__isnull=True).exists(), server.output()
    finally:
        server.stop(signal.SIGKILL, timeout=5)


def stdio_server(settings) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "mcp", "--user", "alice"],
        cwd=PROJECT,
        env=process_env(settings),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def stdio_tool_call(process: subprocess.Popen) -> dict:
    """initialize, initialized and one tools/call, as JSON-RPC lines on the pipes."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "list_research", "arguments": {}},
        },
    ]
    for message in messages:
        process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()
    answers = {}
    while 2 not in answers:
        line = process.stdout.readline()
        assert line, "the stdio server closed its output before answering"
        answer = json.loads(line)
        answers[answer.get("id")] = answer
    return answers[2]["result"]


def test_the_stdio_server_stops_on_sigterm_and_on_eof_after_a_tool_call(
    transactional_db, settings, alice
):
    for stop in ("sigterm", "eof"):
        process = stdio_server(settings)
        try:
            answer = stdio_tool_call(process)
            assert not answer.get("isError"), answer
            if stop == "sigterm":
                process.send_signal(signal.SIGTERM)
            else:
                process.stdin.close()
            process.wait(timeout=STOP_SECONDS)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout):
                pipe.close()
