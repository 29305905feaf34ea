"""The lean model call (agents.llm.openai_client, research.outbound.kept, agents.llm.encoding):
kept connections the process's calls take and give back, each message serialised once, and
the first try's failures going on as the openai client's own would (tests/test_llm.py has
their texts and their tries, 429 included)."""

import datetime
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agents.llm import LLMError
from agents.llm.encoding import EncodedRequests
from agents.llm.openai_client import OpenAIChat
from agents.llm.scripted import ScriptedLLM, call, reply, slow
from tests.conftest import wait_for
from tests.test_llm import TOOLS, ask, chat_client, host_of


def test_an_agents_calls_share_one_kept_connection():
    with ScriptedLLM(keep_alive=True) as llm:
        llm.script(
            "task", call("web_search", query="a"), call("web_search", query="b"), reply("ok")
        )
        client = chat_client(llm.base_url)

        answers = [ask(client, "task", tools=TOOLS) for _ in range(3)]

        assert answers[-1].content == "ok"
        assert len(llm.requests) == 3
        assert llm.connections == 1


def test_the_kept_alive_server_answers_slow_turns_as_they_fall_due_not_as_they_came():
    """The benchmarks' fake model of fixed latency (agents.llm.scripted_loop, on a select(2)
    loop for its timers' precision): a long delay asked first does not hold back a shorter
    one asked after it, and no answer leaves before its delay."""
    with ScriptedLLM(keep_alive=True) as llm:
        llm.script("long task", slow(0.6, reply("long")))
        llm.script("short task", slow(0.1, reply("short")))
        client = chat_client(llm.base_url)
        answered: list[tuple[str, float]] = []

        def agent(task: str) -> None:
            began = time.perf_counter()
            answer = ask(client, task).content
            answered.append((answer, time.perf_counter() - began))

        long = threading.Thread(target=agent, args=("long task",))
        long.start()
        wait_for(lambda: len(llm.requests) == 1, message="the long task's request did not come")
        agent("short task")
        long.join(10)

    assert [answer for answer, _ in answered] == ["short", "long"]
    took = dict(answered)
    assert 0.1 <= took["short"] < 0.5, took
    assert took["long"] >= 0.6, took


def test_the_kept_alive_servers_select_loop_refuses_a_descriptor_past_1024_by_name():
    """select(2) cannot watch a descriptor from 1024 up: the scripted model's loop refuses
    one when it is registered, naming it, instead of failing at its next wait."""
    import os
    import selectors

    from agents.llm.scripted_loop import _Select

    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 1500)
    selector = _Select()
    try:
        with pytest.raises(ValueError, match="cannot watch descriptor 1500"):
            selector.register(high, selectors.EVENT_READ)
        selector.register(read_end, selectors.EVENT_READ)  # under 1024: watched
        os.write(write_end, b"x")
        assert [key.fd for key, _ in selector.select(timeout=1)] == [read_end]
        assert high not in selector.get_map()
    finally:
        selector.close()
        for fd in (read_end, write_end, high):
            os.close(fd)


def test_calls_at_the_same_time_each_have_a_connection_and_later_agents_reuse_them():
    with ScriptedLLM(keep_alive=True) as llm:
        # The server holds the first two answers until both requests are in: both in flight.
        both_in = threading.Barrier(2, timeout=10)

        def held(messages):
            both_in.wait()
            return reply("ok")

        llm.default(held, held, *[reply("ok")] * 4)
        client = chat_client(llm.base_url)
        together = threading.Barrier(2)

        def agent(wait: bool) -> None:
            if wait:
                together.wait(10)
            ask(client, "t")

        def run(*targets) -> None:
            threads = [threading.Thread(target=target) for target in targets]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)

        run(lambda: agent(True), lambda: agent(True))  # both in flight at once: two
        assert llm.connections == 2
        # Agents whose threads start after those ended go over the connections left open.
        run(lambda: agent(False))
        run(lambda: agent(False), lambda: agent(False))

        assert len(llm.requests) == 5
        assert llm.connections == 2


class ClosesWhileKept(BaseHTTPRequestHandler):
    """A server that closes each connection after its answer without saying so, as one does
    when a kept connection sits idle past its timeout."""

    protocol_version = "HTTP/1.1"
    connections = 0

    def setup(self) -> None:
        super().setup()
        type(self).connections += 1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": "fine"}}], "usage": {}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format, *args) -> None:
        pass


def test_a_kept_connection_the_server_closed_is_replaced_without_a_failed_try():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ClosesWhileKept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = chat_client(f"http://127.0.0.1:{server.server_address[1]}/v1")
        answers = [ask(client, "task").content for _ in range(3)]
    finally:
        server.shutdown()
        server.server_close()

    assert answers == ["fine"] * 3
    assert ClosesWhileKept.connections == 3


def test_behind_a_proxy_every_call_goes_through_the_openai_client(monkeypatch):
    with ScriptedLLM(keep_alive=True) as llm:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv("NO_PROXY", "")
        # The process's clients are built once: this test's are built with the proxy set.
        monkeypatch.setattr("research.outbound.clients._clients", {})
        client = chat_client(llm.base_url, max_retries=0, timeout=2)

        with pytest.raises(LLMError) as error:
            ask(client, "task")

        # The client went to the proxy (which is down), not to the endpoint.
        assert str(error.value) == f"llm: cannot connect to {host_of(llm)} after 1 try"
        assert llm.requests == []


def test_the_body_is_the_whole_requests_json_as_the_conversation_grows_and_changes():
    encoded = EncodedRequests()
    messages = [
        {"role": "system", "content": "You research: «café»."},
        {"role": "user", "content": "t"},
    ]
    tools = [{"type": "function", "function": {"name": "web_search"}}]

    def whole(model, messages, tools):
        request = {"model": model, "messages": messages, **({"tools": tools} if tools else {})}
        return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()

    assert encoded.body("m", messages, tools) == whole("m", messages, tools)
    messages.append({"role": "assistant", "content": "next"})
    assert encoded.body("m", messages, tools) == whole("m", messages, tools)
    replaced = [messages[0], {"role": "user", "content": "another task"}]
    assert encoded.body("m", replaced, []) == whole("m", replaced, [])
    assert encoded.body("m", messages, tools) == whole("m", messages, tools)


def test_a_list_of_tool_schemas_is_serialised_once_for_every_agent_that_sends_it(monkeypatch):
    """Agents offered the same tools send the same list (agents.tools.tool.schemas): its bytes
    are made once for the process, whichever thread sends it, and each body is still the
    whole request's JSON."""
    from agents.llm import encoding

    encoded = EncodedRequests()
    tools = [{"type": "function", "function": {"name": "web_search", "description": "«s»"}}]
    other = [{"type": "function", "function": {"name": "read_page"}}]
    dumped = []
    dumps = encoding._dumps

    def counted(value):
        if value is tools or value is other:
            dumped.append(value)
        return dumps(value)

    monkeypatch.setattr(encoding, "_dumps", counted)
    bodies = {}

    def agent(name, offered):
        messages = [{"role": "user", "content": name}]
        bodies[name] = (encoded.body("m", messages, offered), messages, offered)

    threads = [
        threading.Thread(target=agent, args=args)
        for args in (("a", tools), ("b", tools), ("c", other), ("d", tools))
    ]
    for thread in threads:
        thread.start()
        thread.join()

    for body, messages, offered in bodies.values():
        request = {"model": "m", "messages": messages, "tools": offered}
        assert body == json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
    assert dumped == [tools, other]


def _self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


class CountsConnections(ThreadingHTTPServer):
    accepted = 0

    def get_request(self):
        self.accepted += 1  # before the TLS handshake, which may fail
        return super().get_request()


class Completes(ClosesWhileKept):
    """An HTTPS endpoint that answers every call (and keeps its connections)."""

    def do_POST(self) -> None:
        super().do_POST()
        self.close_connection = False


def test_a_tls_handshake_the_kept_connection_fails_leaves_the_endpoint_to_the_client(
    tmp_path, monkeypatch
):
    cert, key = _self_signed(tmp_path)
    server = CountsConnections(("127.0.0.1", 0), Completes)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # The operator's trust store has the endpoint's certificate; the kept connection's does
    # not (as when they differ): the openai client's is the one that counts.
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    monkeypatch.setattr("research.outbound.clients._clients", {})
    trusts_nothing = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    monkeypatch.setattr("research.outbound.kept._tls", lambda: trusts_nothing)
    try:
        client = chat_client(f"https://127.0.0.1:{server.server_address[1]}/v1", max_retries=0)
        answers = [ask(client, "task").content for _ in range(3)]
    finally:
        server.shutdown()
        server.server_close()

    assert answers == ["fine"] * 3  # no failed try, no wait
    # One handshake refused by the kept connection, then the client's one kept connection:
    # the kept connection is not tried again.
    assert server.accepted == 2


# --- Answers as servers write them: the kept connection reads them with httptools ----------


def _completion(content: str) -> bytes:
    answer = {"choices": [{"message": {"role": "assistant", "content": content}}], "usage": {}}
    return json.dumps(answer).encode()


def _read_request(connection: socket.socket) -> bool:
    """One whole request off the connection; False when the client closed it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return True


@contextmanager
def raw_server(answer: Callable[[socket.socket, int], bool]) -> Iterator[dict]:
    """A server that reads each request and writes what `answer(connection, number)` sends,
    byte for byte; `answer` returns whether the connection stays open. Yields its URL and
    how many connections it accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen = {"url": f"http://127.0.0.1:{listener.getsockname()[1]}/v1", "connections": 0}

    def serve(connection: socket.socket) -> None:
        with connection:
            try:
                while _read_request(connection):
                    seen["requests"] = seen.get("requests", 0) + 1
                    if not answer(connection, seen["requests"]):
                        return
            except ConnectionResetError:  # the client closed it with bytes unread
                return

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            seen["connections"] += 1
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield seen
    finally:
        listener.close()


def test_a_chunked_answer_is_read_whole_and_its_connection_kept():
    body = _completion("in three chunks")
    parts = [body[:10], body[10:25], body[25:]]

    def chunked(connection: socket.socket, number: int) -> bool:
        connection.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in parts:
            connection.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        connection.sendall(b"0\r\n\r\n")
        return True

    with raw_server(chunked) as server:
        client = chat_client(server["url"])
        answers = [ask(client, "task").content for _ in range(2)]

    assert answers == ["in three chunks"] * 2
    assert server["connections"] == 1


def test_bytes_a_server_sends_late_on_an_idle_connection_are_never_read_as_an_answer():
    """An answer arrives whole, and later the server writes a stray one on the idle
    connection: the next call must not take it for its own."""
    stray_sent = threading.Event()

    def then_stray(connection: socket.socket, number: int) -> bool:
        body = _completion(f"answer {number}")
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        if number == 1:
            time.sleep(0.2)  # after the client has read the answer
            stale = _completion("a stale answer")
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(stale), stale)
            )
            stray_sent.set()
        return True

    with raw_server(then_stray) as server:
        client = chat_client(server["url"])
        first = ask(client, "task").content
        assert stray_sent.wait(10)
        second = ask(client, "task").content

    assert (first, second) == ("answer 1", "answer 2")
    assert server["connections"] == 2  # the first, with its stray bytes, was not used again


def test_a_connection_idle_past_its_age_is_closed_not_used(monkeypatch):
    """A NAT or a proxy may drop an idle connection without a word: one idle longer than
    the age (a minute; no time at all here) is closed, and the call opens another."""
    monkeypatch.setattr("research.outbound.kept._IDLE_SECONDS", 0.0)
    with ScriptedLLM(keep_alive=True) as llm:
        llm.default(reply("one"), reply("two"))
        client = chat_client(llm.base_url)

        answers = [ask(client, "task").content for _ in range(2)]

        assert answers == ["one", "two"]
        assert llm.connections == 2


def test_an_interim_answer_is_passed_over_for_the_final_one():
    def early_hints(connection: socket.socket, number: int) -> bool:
        body = _completion("after the hints")
        connection.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n")
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return True

    with raw_server(early_hints) as server:
        assert ask(chat_client(server["url"]), "task").content == "after the hints"


def test_an_answer_ended_by_closing_is_read_whole_and_the_next_call_connects_again():
    def until_close(connection: socket.socket, number: int) -> bool:
        connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
        connection.sendall(_completion(f"answer {number}"))
        return False  # the end of the connection is the end of the body

    with raw_server(until_close) as server:
        client = chat_client(server["url"])
        answers = [ask(client, "task").content for _ in range(2)]

    assert answers == ["answer 1", "answer 2"]
    assert server["connections"] == 2


def test_an_answer_that_says_close_is_its_connections_last():
    held = threading.Event()

    def says_close(connection: socket.socket, number: int) -> bool:
        body = _completion(f"answer {number}")
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body)
        )
        held.wait(10)  # the connection stays open, but nothing more is read from it
        return False

    with raw_server(says_close) as server:
        client = chat_client(server["url"], max_retries=0, timeout=2)
        try:
            answers = [ask(client, "task").content for _ in range(2)]
        finally:
            held.set()

    assert answers == ["answer 1", "answer 2"]
    assert server["connections"] == 2  # the second request did not wait on the first's


def test_a_large_answer_read_in_many_pieces_arrives_intact():
    content = "".join(f"line {index}: otters «café» — rivers\n" for index in range(2_400))
    body = _completion(content)

    def slowly(connection: socket.socket, number: int) -> bool:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        for start in range(0, len(body), 7000):
            connection.sendall(body[start : start + 7000])
        return True

    with raw_server(slowly) as server:
        assert len(body) > 64 * 1024  # more than one of the connection's reads
        assert ask(chat_client(server["url"]), "task").content == content


def test_the_answers_headers_reach_the_clients_retry_decision():
    def refuses_retries(connection: socket.socket, number: int) -> bool:
        body = b'{"error": {"message": "overloaded"}}'
        connection.sendall(
            b"HTTP/1.1 500 Internal Server Error\r\nX-Should-Retry: false\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        return True

    with raw_server(refuses_retries) as server, pytest.raises(LLMError) as error:
        ask(chat_client(server["url"], max_retries=2), "task")

    # The server said not to retry: one try, where a 500 is otherwise tried three times.
    assert str(error.value) == f"llm: 500 from {server['url'][7:-3]} after 1 try"
    assert server["requests"] == 1


def test_bytes_after_an_answer_do_not_cost_it_and_are_dropped_with_the_connection():
    def then_garbage(connection: socket.socket, number: int) -> bool:
        body = _completion(f"answer {number}")
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            + b"\x00\x01 not an answer to anything\r\n\r\n"
        )
        return True

    with raw_server(then_garbage) as server:
        client = chat_client(server["url"])
        answers = [ask(client, "task").content for _ in range(2)]

    assert answers == ["answer 1", "answer 2"]
    assert server["connections"] == 2


@pytest.mark.parametrize(
    "written",
    [
        b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"choices": [',  # then closed
        b"this is not HTTP at all\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n",  # then closed
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    ],
    ids=["cut short", "not HTTP", "interim, then closed", "an upgrade"],
)
def test_an_answer_that_never_comes_whole_fails_the_call_in_the_clients_words(written):
    # A fresh connection's failure is not sent again, and the failed connection is not kept.
    def no_answer(connection: socket.socket, number: int) -> bool:
        connection.sendall(written)
        return False

    with raw_server(no_answer) as server:
        client = chat_client(server["url"], max_retries=0)
        for _ in range(2):  # the second call is not read from the first's connection
            with pytest.raises(LLMError) as error:
                ask(client, "task")
            assert str(error.value) == f"llm: cannot connect to {server['url'][7:-3]} after 1 try"

    assert server["connections"] == 2


@pytest.mark.parametrize("key", ["sk-pasted\nwith a line break", "sk-ключ"])
def test_an_api_key_http_cannot_carry_is_named_before_any_call(key):
    with raw_server(lambda connection, number: False) as server, pytest.raises(LLMError) as error:
        OpenAIChat(base_url=server["url"], api_key=key, timeout=2, max_retries=0)

    assert str(error.value) == (
        f"llm: cannot call {server['url'][7:-3]}: its API key holds a character HTTP cannot "
        "carry (a line break, or a letter outside Latin-1)"
    )
    assert server["connections"] == 0


def test_the_kept_alive_scripted_model_answers_a_bad_length_with_a_400():
    """The scripted model's loop server (agents.llm.scripted_loop) answers what is not a
    length as http.server did, instead of closing without a word."""
    with ScriptedLLM(keep_alive=True) as llm:
        port = int(llm.base_url.split(":")[2].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n")
            answer = connection.recv(4096)

    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"Content-Length is not a number" in answer
