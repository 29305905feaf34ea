"""callback_url: a research that ends posts a signed JSON to an HTTPS receiver (a real TLS
server here), retried with backoff, through read_page's address guard."""

import hashlib
import hmac
import ipaddress
import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction

from agents.llm.scripted import reply
from research import services
from research.models import Callback, Run
from research.ops import callbacks
from research.ops.callbacks import CallbackSender
from research.outbound import not_public
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


def ended_research(owner) -> Run:
    run = services.run_start(owner=owner, topic=TOPIC)
    services.run_finish(run_id=run.pk, report="Cranes migrate in autumn.")
    return run


def test_a_host_name_of_a_private_address_is_refused_by_the_guard_and_never_posted(
    sender, scripted_llm, receiver_for, api, settings
):
    scripted_llm.script(TOPIC, reply("done"))
    receiver = receiver_for()
    settings.READ_PAGE_ALLOWED_HOSTS = []  # a name: registration leaves it to the guard
    assert start(api, receiver.url()).status_code == 201
    callback = wait_for(lambda: Callback.objects.filter(gave_up_at__isnull=False).first())
    assert callback.last_error == (
        "localhost resolves to 127.0.0.1, a loopback address; "
        "a callback is only posted to a public address."
    )
    assert callback.attempts == 1 and receiver.received == []


def test_a_row_stored_before_registration_refused_its_address_is_given_up_unposted(
    sender, receiver_for, alice
):
    receiver = receiver_for()
    Callback.objects.create(run=ended_research(alice), url=receiver.url(host="127.0.0.1"))
    callback = wait_for(lambda: Callback.objects.filter(gave_up_at__isnull=False).first())
    assert callback.last_error == (
        "callback_url points to 127.0.0.1, a loopback address; "
        "a callback is only posted to a public address."
    )
    assert callback.attempts == 1 and receiver.received == []


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "127.0.0.1", "10.0.0.1", "100.64.0.1", "169.254.169.254", "224.0.0.1",
     "0.0.0.0", "240.0.0.1", "2606:4700::1", "::1", "::ffff:10.0.0.1", "2002:7f00:1::",
     "fd00:ec2::254", "fe80::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2"],
)  # fmt: skip
@pytest.mark.django_db
def test_registration_refuses_exactly_the_addresses_the_senders_guard_refuses(api, address):
    ip = ipaddress.ip_address(address)
    host = f"[{address}]" if ip.version == 6 else address
    response = start(api, f"https://{host}/hook")
    assert (response.status_code == 201) == (not_public(ip) is None), response.content


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["0177.0.0.1", "127.000.000.001", "0x7f.0.0.1", "2130706433"])
def test_an_ambiguous_ipv4_address_is_a_400_at_registration(api, host):
    response = start(api, f"https://{host}/hook")
    assert response.status_code == 400, response.content
    assert response.json()["callback_url"] == [
        f"callback_url's host {host} is an IPv4 address written with leading zeros, in octal "
        "or hex, or with fewer than four parts, which programs read differently; write it "
        "as four decimal numbers without leading zeros, or use a host name."
    ]
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "host", ["127.0.0.1", "10.1.2.3", "169.254.169.254", "100.64.0.1", "[::1]", "[::ffff:7f00:1]"]
)
def test_a_non_public_address_is_a_400_at_registration_as_the_guard_would_refuse_it(api, host):
    kind = not_public(ipaddress.ip_address(host.strip("[]")))
    assert kind  # registration and the sender's guard judge an address alike
    response = start(api, f"https://{host}/hook")
    assert response.status_code == 400, response.content
    assert response.json()["callback_url"] == [
        f"callback_url points to {host.strip('[]')}, a {kind} address; "
        "a callback is only posted to a public address."
    ]


@pytest.mark.django_db
def test_an_address_allowed_by_read_page_allowed_hosts_is_accepted(api, settings):
    settings.READ_PAGE_ALLOWED_HOSTS = ["10.1.2.3:8443"]
    assert start(api, "https://10.1.2.3:8443/hook").status_code == 201


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_one_bad_callback_url_in_a_round_does_not_hold_up_another_users_callback(
    scripted_llm, settings, tmp_path, alice, bob
):
    """An unparsable URL stored before registration refused it is given up on its own; the
    other callbacks leased in the same round are posted at once, not 120 s later."""
    from tests.conftest import start_daphne

    receiver = Receiver(tmp_path, [])
    with transaction.atomic():  # both due in the sender's first round, the bad one first
        bad = Callback.objects.create(run=ended_research(alice), url="https://0177.0.0.1/hook")
        good = Callback.objects.create(run=ended_research(bob), url=receiver.url())
    server = start_daphne(
        settings,
        tmp_path,
        CALLBACK_CA_BUNDLE=str(receiver.cert),
        READ_PAGE_ALLOWED_HOSTS=f"localhost:{receiver.port}",
        CALLBACK_POLL_SECONDS="0.2",
    )
    try:
        wait_for(lambda: receiver.received, timeout=30, message=server.output())
        wait_for(lambda: Callback.objects.filter(pk=bad.pk, gave_up_at__isnull=False).exists())
    finally:
        server.stop()
        receiver.close()
    assert json.loads(receiver.received[0][1])["run"]["id"] == good.run_id
    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.delivered_at is not None and good.attempts == 1
    assert bad.attempts == 1 and bad.delivered_at is None
    assert bad.last_error.startswith("callback_url's host 0177.0.0.1 is an IPv4 address")


def test_a_row_whose_post_raises_is_retried_on_its_own_and_the_round_goes_on(
    receiver_for, alice, bob, monkeypatch
):
    receiver = receiver_for()
    broken = Callback.objects.create(run=ended_research(alice), url=receiver.url())
    good = Callback.objects.create(run=ended_research(bob), url=receiver.url())
    real_payload = callbacks.payload

    def payload(callback: Callback) -> bytes:
        if callback.pk == broken.pk:
            raise KeyError("flagged_claims")
        return real_payload(callback)

    monkeypatch.setattr(callbacks, "payload", payload)
    assert callbacks.send_due() == 1
    broken.refresh_from_db()
    assert broken.attempts == 1 and broken.gave_up_at is None
    assert broken.next_attempt_at is not None
    assert broken.last_error == "the sender failed on this callback (KeyError: 'flagged_claims')."
    assert Callback.objects.get(pk=good.pk).delivered_at is not None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://example.org/hook", "callback_url must be an https:// URL."),
        ("https://user:pw@example.org/hook", "callback_url must not carry credentials"),
        ("https:///hook", "callback_url has no host."),
        (  # taken, and posted to "exa%20mple.com"
            "https://exa mple.com/hook",
            "callback_url is not a valid URL: its host 'exa mple.com' is not a host name or an "
            "address.",
        ),
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


@pytest.mark.django_db
def test_the_senders_check_each_second_finds_exactly_the_callbacks_it_would_take(
    run_factory, settings
):
    """The sender asks every second whether a callback is due (one statement built once)
    and takes them only then: what it asks must be what callbacks_take_due would take, or
    a callback would never be posted."""
    from datetime import timedelta

    from django.utils import timezone

    from research.services import callbacks as service

    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    url = "https://hooks.example.org/canopy"
    later = timezone.now() + timedelta(hours=1)

    def research(status: str | None, **fields) -> Callback:
        run = run_factory(topic=f"research {Callback.objects.count()}")
        if status is not None:
            services.run_finish(run_id=run.pk, **{status: "it ended"})
        return Callback.objects.create(run=run, url=url, **fields)

    def due() -> tuple[bool, list[int]]:
        with transaction.atomic():
            taken = [callback.pk for callback in service.callbacks_take_due()]
            transaction.set_rollback(True)  # the lease is not kept
        return service.callbacks_due(), taken

    research(None)  # still working
    research("report", delivered_at=timezone.now())
    research("error", gave_up_at=timezone.now())
    research("report", next_attempt_at=later)  # its backoff is not over
    assert due() == (False, [])

    ended = research("report")
    failed = research("error", next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert due() == (True, [ended.pk, failed.pk])
