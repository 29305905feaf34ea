"""The lean model call (agents.llm.openai_client, research.outbound.kept, agents.llm.encoding):
one kept connection per agent thread, each message serialised once, and the first try's
failures going on as the openai client's own would (tests/test_llm.py has their texts and
their tries, 429 included)."""

import datetime
import ipaddress
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agents.llm import LLMError
from agents.llm.encoding import EncodedRequests
from agents.llm.scripted import ScriptedLLM, call, reply
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


def test_each_thread_keeps_its_own_connection():
    with ScriptedLLM(keep_alive=True) as llm:
        llm.default(*[reply("ok")] * 4)
        client = chat_client(llm.base_url)
        threads = [
            threading.Thread(target=lambda: [ask(client, "t") for _ in range(2)]) for _ in "ab"
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)

        assert len(llm.requests) == 4
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
