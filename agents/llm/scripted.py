"""A scripted OpenAI-compatible endpoint on 127.0.0.1, for tests that run agents over real HTTP.

The LLM is the one outside service tests replace, and they replace it over the wire: agents talk
to this server through the real `openai` client, so retries, timeouts and parsing are exercised
too. Standard library only.

    from agents.llm.scripted import ScriptedLLM, call, calls, fail, reply, slow

    with ScriptedLLM() as llm:
        llm.script(
            "Compare Python context managers",        # found in the agent's first user message
            call("web_search", query="context managers"),
            fail(503, times=2),                      # two failed requests, the client retries
            calls(call("read_page", url="http://a"), call("read_page", url="http://b")),
            slow(0.5, reply("The report.")),         # sleeps, then the final answer
        )
        llm.script("child task", lambda messages: reply(f"saw {len(messages)} messages"))
        ...point settings.OPENAI_BASE_URL at llm.base_url, run the agent...
        assert llm.tool_results("Compare Python", name="web_search")[0]["content"] == "..."
        assert llm.unscripted == []

Scripts. `script(match, *turns)` gives turns, one per /v1/chat/completions request, to the
conversation whose FIRST user message (the task) contains `match`; when several matches fit,
the longest wins; calling it again for the same match appends turns. The script belongs to the
match, not to one agent: give agents distinct tasks. `default(*turns)` is the script for
conversations nothing else matches. A conversation with no script left is answered with a final
text ("(scripted: no more turns for this agent)" or "(scripted: no script matches this task)"),
so runs end instead of hanging, and its task is appended to `.unscripted`.

Turns. `reply(text)` is a final answer. `call(tool, **arguments)` is one tool call (the tool
name is positional-only, so a tool argument may be called `name`); `calls(call(...), ...)` puts
several in one assistant turn; `raw_call(tool, text)` sends arguments that need not be JSON.
`fail(status, times=1)` answers that HTTP status with an OpenAI-style error body for `times`
requests. `slow(seconds, turn)` answers `seconds` after the request came in, the server's own
parsing and scripting inside them (a client timeout still consumes the turn). A callable turn
takes the request's messages and returns a turn (or a str, as a reply); if it raises, the agent
gets a final text naming the error and `.errors` records it. Every turn carries usage, 100
prompt and 20 completion tokens unless given `usage=(input, output)`.

Records. `.requests` holds every parsed request body; `.requests_for(match)` those whose task
contains `match`; `.tool_results(match, name=None)` the tool-result messages those
conversations sent back, each once, in order, with the tool's `name` filled in from the
assistant turn that called it. `.connections` counts the connections accepted: one a request,
unless `ScriptedLLM(keep_alive=True)` keeps them open between requests as a real endpoint does
(the benchmarks). `ScriptedLLM.down_url()` is a base URL where nothing listens.
"""

import itertools
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.llm.scripted_loop import LoopServer, close_django_connections
from agents.llm.turns import (  # noqa: F401  (the script helpers tests import from here)
    NO_MORE_TURNS,
    NO_SCRIPT,
    Turn,
    TurnSpec,
    as_turn,
    call,
    calls,
    error_body,
    fail,
    raw_call,
    reply,
    slow,
)


@dataclass(frozen=True)
class Taken:
    """A request's turn as its script gave it, before it is played."""

    spec: TurnSpec | None
    messages: list[dict[str, Any]]
    match: str | None
    task: str
    model: str


class ScriptedLLM:
    """The server; see the module docstring. Thread-safe: agents call it from many threads."""

    def __init__(self, *, keep_alive: bool = False) -> None:
        # Tests want one request per connection (see _Handler); benchmarks keep connections
        # alive, as a real endpoint does, so a call's cost is not a new TCP connection's, and
        # on one loop (agents.llm.scripted_loop), so that the model costs their machine little.
        self._keep_alive = keep_alive
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[TurnSpec]] = {}
        self._requests: list[dict[str, Any]] = []
        self._unscripted: list[str] = []
        self._errors: list[str] = []
        self._ids = itertools.count(1)
        self._connections = 0
        self._answering = 0.0
        self._stopping = threading.Event()
        self._server: _Server | LoopServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> "ScriptedLLM":
        self._stopping.clear()
        if self._keep_alive:
            self._server = LoopServer(self).start()
            return self
        server = _Server(("127.0.0.1", 0), _Handler)
        server.scripted = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        # Wakes handlers sleeping in slow() turns, so stop() never waits for them.
        self._stopping.set()
        if isinstance(self._server, _Server):
            self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> "ScriptedLLM":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("ScriptedLLM is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def connections(self) -> int:
        """Connections accepted so far (each carries one request unless kept alive)."""
        with self._lock:
            return self._connections

    @property
    def answering_seconds(self) -> float:
        """The time handlers spent on requests so far, each from its request line's arrival to
        its answer's last byte, `slow()` delays included: the model's own time, which a
        benchmark takes out of the client's."""
        with self._lock:
            return self._answering

    @staticmethod
    def down_url() -> str:
        """A base URL on a port nothing listens on (just freed: no other test takes it fast)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    # --- scripts --------------------------------------------------------------------------

    def script(self, match: str, *turns: TurnSpec) -> "ScriptedLLM":
        with self._lock:
            self._scripts.setdefault(match, deque()).extend(turns)
        return self

    def default(self, *turns: TurnSpec) -> "ScriptedLLM":
        # The empty match is in every task and is the shortest, so it only wins alone.
        return self.script("", *turns)

    # --- records --------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def unscripted(self) -> list[str]:
        """Tasks of conversations answered without a script, one entry per such answer."""
        with self._lock:
            return list(self._unscripted)

    @property
    def errors(self) -> list[str]:
        """Errors raised by callable turns."""
        with self._lock:
            return list(self._errors)

    def requests_for(self, match: str) -> list[dict[str, Any]]:
        return [body for body in self.requests if match in task_of(body.get("messages") or [])]

    def tool_results(self, match: str, name: str | None = None) -> list[dict[str, Any]]:
        """Each tool message of the matching conversations once, in order, with its `name`."""
        results: dict[str, dict[str, Any]] = {}
        for body in self.requests_for(match):
            messages = body.get("messages") or []
            names = _tool_names(messages)
            for message in messages:
                call_id = message.get("tool_call_id")
                if message.get("role") == "tool" and call_id not in results:
                    results[call_id] = {**message, "name": names.get(call_id, "")}
        return [result for result in results.values() if name is None or result["name"] == name]

    # --- answering ------------------------------------------------------------------------

    def _answer(self, body: dict[str, Any]) -> tuple[Turn, dict[str, Any]]:
        return self._answered(self._taken(body))

    def _taken(self, body: dict[str, Any]) -> Taken:
        """The request recorded and the next turn of its script taken (not yet played)."""
        messages = body.get("messages") or []
        task = task_of(messages)
        with self._lock:
            self._requests.append(body)
            match, spec = self._take(task)
        return Taken(spec, messages, match, task, str(body.get("model", "scripted")))

    def _answered(self, taken: Taken) -> tuple[Turn, dict[str, Any]]:
        """The turn played (a function turn called) and its body."""
        turn = self._resolve(taken.spec, taken.messages, match=taken.match, task=taken.task)
        if turn.status is not None:
            return turn, error_body(turn)
        return turn, self._completion(turn, model=taken.model)

    def _take(self, task: str) -> tuple[str | None, TurnSpec | None]:
        """The next turn of the longest matching script (called under the lock)."""
        matches = [match for match in self._scripts if match in task]
        if not matches:
            return None, None
        match = max(matches, key=len)
        queue = self._scripts[match]
        if not queue:
            return match, None
        spec = queue.popleft()
        if isinstance(spec, Turn):
            self._repeat_rest(queue, spec)
        return match, spec

    def _resolve(
        self, spec: TurnSpec | None, messages: list[dict], *, match: str | None, task: str
    ) -> Turn:
        if spec is None:
            with self._lock:
                self._unscripted.append(task)
            return reply(NO_SCRIPT if match is None else NO_MORE_TURNS)
        if isinstance(spec, Turn):
            return spec
        try:
            turn = as_turn(spec(messages))
        except Exception as error:  # a bug in the test's function: end the run, say why
            text = f"(scripted: the turn function raised {type(error).__name__}: {error})"
            with self._lock:
                self._errors.append(text)
            return reply(text)
        with self._lock:
            self._repeat_rest(self._scripts[match], turn)  # type: ignore[index]
        return turn

    @staticmethod
    def _repeat_rest(queue: deque[TurnSpec], turn: Turn) -> None:
        if turn.times > 1:
            queue.appendleft(replace(turn, times=turn.times - 1))

    def _completion(self, turn: Turn, *, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments},
                }
                for tool, arguments in turn.tool_calls
            ]
        prompt_tokens, completion_tokens = turn.usage
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if turn.tool_calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class _Server(ThreadingHTTPServer):
    def process_request_thread(self, request, client_address) -> None:
        with self.scripted._lock:
            self.scripted._connections += 1
        try:
            super().process_request_thread(request, client_address)
        finally:
            close_django_connections()

    # Every agent of a benchmark may connect at once (bench/loop_agents.py: 200 tasks in one
    # go); a backlog too small for them (the default is 5; 64 was too few for 120) makes the
    # kernel drop connections and the client wait a second to retry them.
    request_queue_size = 1024
    scripted: "ScriptedLLM"


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so no kept-alive connection outlives stop() and
    # a stopped server really looks down (kept-alive connections: agents.llm.scripted_loop).
    protocol_version = "HTTP/1.0"

    def parse_request(self) -> bool:
        self._began = time.perf_counter()  # the request line is in: the answer starts here
        return super().parse_request()

    def do_POST(self) -> None:
        try:
            self._post()
        finally:
            scripted: ScriptedLLM = self.server.scripted  # type: ignore[attr-defined]
            with scripted._lock:
                scripted._answering += time.perf_counter() - self._began

    def _post(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, error_body(Turn(status=404, error_message=f"no route {self.path}")))
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._send(400, error_body(Turn(status=400, error_message="body is not a JSON object")))
            return
        scripted: ScriptedLLM = self.server.scripted  # type: ignore[attr-defined]
        turn, payload = scripted._answer(body)
        # A model of fixed latency: the answer leaves `delay` after the request line came in,
        # this server's own parsing and scripting inside it, so that a benchmark's ideal
        # (its calls times their delay) leaves out no time of the model's (issue 25).
        left = turn.delay - (time.perf_counter() - self._began) if turn.delay else 0.0
        if left > 0 and scripted._stopping.wait(left):
            return
        self._send(turn.status or 200, payload)

    def do_GET(self) -> None:
        self._send(404, error_body(Turn(status=404, error_message=f"no route {self.path}")))

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: test output is for the tests."""

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left; the turn is spent, as with a real endpoint


def task_of(messages: list[dict[str, Any]]) -> str:
    """The text of the first user message: what identifies an agent's conversation."""
    for message in messages:
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _tool_names(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {
        tool_call["id"]: tool_call.get("function", {}).get("name", "")
        for message in messages
        if message.get("role") == "assistant"
        for tool_call in message.get("tool_calls") or []
        if "id" in tool_call
    }
