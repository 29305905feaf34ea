"""callback_url: a research that ends posts a signed JSON to an HTTPS receiver (a real TLS
server here), retried with backoff, through read_page's address guard."""

import hashlib
import hmac
import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.callbacks import CallbackSender
from agents.llm.scripted import reply
from research.models import Callback, Run
from research.services.callbacks import signing_key
from tests.conftest import wait_finished, wait_for

TOPIC = "When do cranes migrate?"


class Receiver:
    """An HTTPS server on localhost that answers the statuses it is given, then 200."""

    def __init__(self, tmp_path, statuses: list[int]) -> None:
        self.cert = tmp_path / "receiver.pem"
        key = tmp_path / "receiver.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
             "-keyout", str(key), "-out", str(self.cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        self.statuses = list(statuses)
        self.received: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}/hooks/canopy"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver_for(tmp_path, settings):
    made = []

    def make(*statuses: int) -> Receiver:
        receiver = Receiver(tmp_path, list(statuses))
        made.append(receiver)
        settings.CALLBACK_CA_BUNDLE = str(receiver.cert)
        # The guard refuses loopback addresses; this test's receiver is allowed by name.
        settings.READ_PAGE_ALLOWED_HOSTS = [f"localhost:{receiver.port}"]
        return receiver

    yield make
    for receiver in made:
        receiver.close()


@pytest.fixture
def sender(agent_pool, settings):
    settings.CALLBACK_POLL_SECONDS = 0.05
    settings.CALLBACK_RETRY_BASE_SECONDS = 0.1
    sender = CallbackSender().start()
    yield sender
    sender.stop()


def start(api, url: str):
    return api.post("/v1/gb/research", {"topic": TOPIC, "callback_url": url}, format="json")


def test_the_end_of_a_research_is_posted_signed_and_retried_until_accepted(
    sender, scripted_llm, receiver_for, api
):
    scripted_llm.script(TOPIC, reply("Cranes migrate in autumn."))
    receiver = receiver_for(503, 500)
    response = start(api, receiver.url())
    assert response.status_code == 201, response.content
    run = wait_finished(Run.objects.get(pk=response.json()["id"]))

    wait_for(lambda: len(receiver.received) == 3, message="three posts expected")
    callback = wait_for(lambda: Callback.objects.filter(delivered_at__isnull=False).first())
    assert (callback.attempts, callback.last_error) == (3, "")
    headers, body = receiver.received[-1]
    timestamp, signature = (
        part.split("=", 1)[1] for part in headers["X-Canopy-Signature"].split(",")
    )
    expected = hmac.new(signing_key(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(signature, expected)
    document = json.loads(body)
    assert document["event"] == "research.finished"
    assert document["run"]["id"] == run.pk and document["run"]["status"] == "done"
    assert document["run"]["report"] == "Cranes migrate in autumn."
    # The retries are the same delivery, for a receiver that dedupes.
    assert len({json.loads(b)["delivery"] for _, b in receiver.received}) == 1
    assert headers["Content-Type"] == "application/json"


def test_a_receiver_that_keeps_failing_is_given_up_after_the_last_attempt(
    sender, scripted_llm, receiver_for, api, settings
):
    settings.CALLBACK_MAX_ATTEMPTS = 3
    scripted_llm.script(TOPIC, reply("done"))
    receiver = receiver_for(500, 500, 500, 500, 500)
    start(api, receiver.url())
    callback = wait_for(lambda: Callback.objects.filter(gave_up_at__isnull=False).first())
    assert callback.attempts == 3 and callback.last_error == "localhost answered 500"
    assert len(receiver.received) == 3


def test_a_callback_to_a_private_address_is_refused_by_the_guard_and_never_posted(
    sender, scripted_llm, receiver_for, api
):
    scripted_llm.script(TOPIC, reply("done"))
    receiver = receiver_for()
    start(api, receiver.url(host="127.0.0.1"))  # allowed by name only, not this address
    callback = wait_for(lambda: Callback.objects.filter(gave_up_at__isnull=False).first())
    assert "127.0.0.1 is a loopback address" in callback.last_error
    assert callback.attempts == 1 and receiver.received == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://example.org/hook", "callback_url must be an https:// URL."),
        ("https://user:pw@example.org/hook", "callback_url must not carry credentials"),
        ("https:///hook", "callback_url has no host."),
    ],
)
def test_a_bad_callback_url_is_a_400_naming_it_and_starts_nothing(api, url, message):
    response = start(api, url)
    assert response.status_code == 400
    assert response.json()["callback_url"][0].startswith(message)
    assert not Run.objects.exists()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_served_app_posts_the_callback_of_a_research_started_over_http(
    scripted_llm, settings, tmp_path, alice
):
    """The whole path on a real daphne: its sender starts with the app."""
    from tests.conftest import start_daphne
    from tests.test_scaleout import api_client

    receiver = Receiver(tmp_path, [502])
    scripted_llm.script(TOPIC, reply("In autumn."))
    server = start_daphne(
        settings,
        tmp_path,
        CALLBACK_CA_BUNDLE=str(receiver.cert),
        READ_PAGE_ALLOWED_HOSTS=f"localhost:{receiver.port}",
        CALLBACK_POLL_SECONDS="0.2",
        CALLBACK_RETRY_BASE_SECONDS="0.2",
    )
    try:
        with api_client(server.url, alice) as api:
            created = api.post(
                "/v1/gb/research", json={"topic": TOPIC, "callback_url": receiver.url()}
            )
        assert created.status_code == 201, created.text
        wait_for(lambda: len(receiver.received) == 2, timeout=30, message=server.output())
    finally:
        server.stop()
        receiver.close()
    assert json.loads(receiver.received[-1][1])["run"]["id"] == created.json()["id"]
    assert Callback.objects.get().delivered_at is not None


def test_a_host_that_does_not_resolve_is_tried_again_not_given_up(
    sender, scripted_llm, api, settings
):
    settings.CALLBACK_MAX_ATTEMPTS = 3
    scripted_llm.script(TOPIC, reply("done"))
    start(api, "https://no-such-host.invalid/hook")
    callback = wait_for(lambda: Callback.objects.filter(attempts__gte=1).first())
    # A DNS failure may pass: the callback waits for its next attempt instead of giving up.
    assert callback.gave_up_at is None and callback.next_attempt_at is not None
    assert "no-such-host.invalid does not resolve" in callback.last_error
