"""Who a request is (research/auth.py): API tokens and sessions, read by statements built once,
answer as DRF's and Django's own lookups do, on PostgreSQL and on the embedded SQLite."""

from datetime import timedelta

from django.contrib.sessions.models import Session
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from research.auth import SessionStore
from tests.helpers import on_fresh_sqlite

URL = "/v1/gb/research"


def test_a_token_is_its_user_and_an_unknown_or_inactive_one_is_refused(alice, bob, run_factory):
    run = run_factory()
    alices, bobs = (Token.objects.create(user=user).key for user in (alice, bob))
    client = APIClient()

    def get(path, key):
        return client.get(path, HTTP_AUTHORIZATION=f"Token {key}")

    mine, not_bobs = get(f"{URL}/{run.pk}", alices), get(f"{URL}/{run.pk}", bobs)
    unknown = get(URL, "0" * 40)
    bob.is_active = False
    bob.save()
    inactive = get(URL, bobs)

    assert mine.status_code == 200
    assert mine.json()["id"] == run.pk
    assert not_bobs.status_code == 404
    assert unknown.status_code == 401
    assert unknown.json() == {"detail": "Invalid token."}
    assert unknown["WWW-Authenticate"] == "Token"
    assert inactive.status_code == 401
    assert inactive.json() == {"detail": "User inactive or deleted."}


def test_a_session_signs_its_user_in_until_it_expires(client, alice, run_factory):
    run = run_factory()
    client.force_login(alice)
    key = client.cookies["sessionid"].value

    api, page = client.get(f"{URL}/{run.pk}"), client.get(f"/runs/{run.pk}/")
    Session.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    api_after, page_after = client.get(f"{URL}/{run.pk}"), client.get(f"/runs/{run.pk}/")
    expired = SessionStore(key)
    expired.load()

    assert api.status_code == 200
    assert page.status_code == 200
    assert api_after.status_code == 401
    assert page_after.status_code == 302
    assert page_after["Location"].startswith("/login/")
    assert expired.session_key is None  # a save makes a new session, not the expired one


def test_the_embedded_sqlite_reads_tokens_and_sessions_alike(tmp_path):
    """The embedded default: a fresh SQLite file, its tokens and sessions, in another process."""
    script = """
import django, json
django.setup()
from datetime import timedelta
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from research.auth import SessionStore
from tests.helpers import on_fresh_sqlite
alice = User.objects.create_user("alice")
key = Token.objects.create(user=alice).key
api = Client(HTTP_HOST="localhost")
def status(key):
    return api.get("/v1/gb/research", HTTP_AUTHORIZATION=f"Token {key}").status_code
live, expired = SessionStore(), SessionStore()
live["who"], expired["who"] = "live", "expired"
live.create()
expired.set_expiry(timezone.now() + timedelta(milliseconds=1))
expired.create()
expired.set_expiry(None)
from django.contrib.sessions.models import Session
Session.objects.filter(pk=expired.session_key).update(
    expire_date=timezone.now() - timedelta(seconds=1)
)
print(json.dumps({
    "token": status(key),
    "wrong token": status("0" * 40),
    "live": SessionStore(live.session_key).get("who"),
    "expired": SessionStore(expired.session_key).get("who"),
}))
"""
    result = on_fresh_sqlite(script, tmp_path / "auth.sqlite3")
    assert result == {"token": 200, "wrong token": 401, "live": "live", "expired": None}
