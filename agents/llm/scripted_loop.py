"""The scripted endpoint's kept-alive server (agents.llm.scripted): every connection on one
asyncio loop in one thread, as a real endpoint's answers cost this machine nothing.

The benchmarks of issue 25 run the scripted model in their own process, on the same two cores
as Canopy. With a thread per connection (http.server), 120 agents' calls cost that process
0.66 ms of CPU each: the headers parsed by the email package, a thread woken per request and
again per answer. Here a request is its request line, its headers read for Content-Length,
and its body; the answer leaves `delay` after the request came in from a timer on the loop.

The loop waits in select(2), not epoll: epoll's timeout counts whole milliseconds, so an answer
of 50 ms left 0.7 ms late on average on this machine, and a tree of nine calls on its critical
path counted about 6 ms of the fake model's lateness as Canopy's (issue 25, round thirty-six).
select's timeout counts microseconds: 0.3 ms late. Its limit, descriptors under 1024, holds
the benchmarks' 200 connections; a connection given a descriptor past it is refused, with
that said in the log, rather than the loop ending (`_Select`).

The scripted turns are the same (ScriptedLLM._take, _resolve, _completion). A turn that is a
function runs on a thread of its own: a test's function may block (a barrier that waits for a
second request) and must not stop the loop.
"""

import asyncio
import contextlib
import json
import selectors
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from agents.llm.turns import Turn, error_body

MAX_HEADERS = 64 * 1024
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


class Scripted(Protocol):
    """What the server asks of agents.llm.scripted.ScriptedLLM."""

    _lock: threading.Lock
    _connections: int
    _answering: float

    def _taken(self, body: dict[str, Any]) -> Any: ...  # its Taken, with the turn's spec

    def _answered(self, taken: Any) -> tuple[Turn, dict[str, Any]]: ...


class _Select(selectors.SelectSelector):
    """select(2), which cannot watch a descriptor from FD_SETSIZE (1024) up: registering one
    fails at once, naming it (the loop logs it and goes on), where select() would fail at
    the loop's next wait and end the loop."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        if key.fd >= 1024:
            super().unregister(fileobj)
            raise ValueError(
                f"the scripted model's loop cannot watch descriptor {key.fd}: select() "
                "stops at 1024; this process holds too many open files"
            )
        return key


class LoopServer:
    """Serves `scripted` on 127.0.0.1, kept-alive HTTP/1.1, until stop()."""

    def __init__(self, scripted: Scripted) -> None:
        self.scripted = scripted
        # Timers to a few tenths of a millisecond, not to the next whole one (see above).
        self.loop = asyncio.SelectorEventLoop(_Select())
        self.port = 0
        self._handlers: set[asyncio.Task] = set()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="scripted-llm", daemon=True)

    def start(self) -> "LoopServer":
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the scripted model's loop did not start")
        return self

    @property
    def server_address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def server_close(self) -> None:
        """Closes the listener and every connection; an answer waiting for its delay is
        never sent, and the port looks down at once."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self._close)
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=1024, limit=MAX_HEADERS)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._started.set()
        self.loop.run_forever()
        self.loop.close()

    def _close(self) -> None:
        self._server.close()
        for task in self._handlers:
            task.cancel()
        self.loop.call_soon(self.loop.stop)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        task = asyncio.current_task()
        self._handlers.add(task)
        with self.scripted._lock:
            self.scripted._connections += 1
        try:
            while await self._request(reader, writer):
                pass
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client left, or sent what is not HTTP: its connection ends
        except asyncio.CancelledError:
            pass  # stop()
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request and its answer; False when the connection is done."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # closed between requests
        began = time.perf_counter()  # the request is in: the answer starts here
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = (lines[0].split(" ") + ["", ""])[:3]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip()) if value.strip().isdigit() else -1
        if length < 0:  # as http.server answers it, and the connection ends
            turn = Turn(status=400, error_message="Content-Length is not a number")
            await self._send(writer, turn, error_body(turn), began)
            return False
        data = await reader.readexactly(length) if length else b""
        turn, payload = await self._answer(method, path, data)
        left = turn.delay - (time.perf_counter() - began) if turn.delay else 0.0
        if left > 0:
            await asyncio.sleep(left)
        await self._send(writer, turn, payload, began)
        return True

    async def _send(
        self, writer: asyncio.StreamWriter, turn: Turn, payload: dict[str, Any], began: float
    ) -> None:
        body = json.dumps(payload).encode()
        status = turn.status or 200
        writer.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, REASONS.get(status, "Error").encode(), len(body), body)
        )
        with self.scripted._lock:
            self.scripted._answering += time.perf_counter() - began
        await writer.drain()

    async def _answer(self, method: str, path: str, data: bytes) -> tuple[Turn, dict[str, Any]]:
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            turn = Turn(status=404, error_message=f"no route {path}")
            return turn, error_body(turn)
        try:
            body = json.loads(data)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            turn = Turn(status=400, error_message="body is not a JSON object")
            return turn, error_body(turn)
        taken = self.scripted._taken(body)
        if callable(taken.spec):  # a test's function may block: a thread of its own
            return await self._in_thread(self.scripted._answered, taken)
        return self.scripted._answered(taken)

    async def _in_thread(self, function: Callable[..., Any], *arguments: Any) -> Any:
        done = self.loop.create_future()

        def settle(setter: Callable[[Any], None], value: Any) -> None:
            if not done.done():
                setter(value)

        def run() -> None:
            try:
                result = function(*arguments)
            except BaseException as error:  # noqa: BLE001  (raised on the loop's side)
                outcome = (done.set_exception, error)
            else:
                outcome = (done.set_result, result)
            finally:
                close_django_connections()
            # stop() may have closed the loop meanwhile: nobody waits for the answer then.
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(settle, *outcome)

        threading.Thread(target=run, name="scripted-turn", daemon=True).start()
        return await done


def close_django_connections() -> None:
    """A turn function may read the test's database from its request's thread: close that
    thread's connection as the thread ends, or each request leaks one."""
    django_db = sys.modules.get("django.db")
    if django_db is not None:
        django_db.connections.close_all()
