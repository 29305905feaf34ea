"""Callbacks: a research may carry an HTTPS URL that gets a signed POST when it ends.

The rows are an outbox: `callback_register` stores the URL with the research; the sender
(research/ops/callbacks.py, in each web process) takes the callbacks of ended researches that are
due, one process per row at a time, posts, and records the outcome here, retrying with
exponential backoff until CALLBACK_MAX_ATTEMPTS. A crash between a post and its record
means one more post, never none: receivers dedupe on the delivery id.
"""

import hashlib
import hmac
import time
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from research.errors import InvalidInput
from research.models import Callback, Run, Status
from research.outbound import (
    AmbiguousAddress,
    BadURL,
    host_allowed,
    literal_address,
    not_public,
    parse_url,
)
from research.sql import Instances, one, placeholders

ENDED = (Status.DONE, Status.FAILED)
LEASE_SECONDS = 120  # longer than one post may take: the row is not posted twice at once


def callback_url_check(url: str) -> str:
    """The URL's shape (https, a host, no credentials), and its host when an address: one
    written so that programs disagree on it is refused, and so is one that is not public.
    A host name is judged by the sender's address guard at each delivery, as DNS may change.
    The sender checks every row again, so a row stored before a rule existed is given up."""
    from urllib.parse import urlsplit

    url = (url or "").strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        raise _invalid(f"callback_url is not a valid URL: {url!r}.") from None
    if parts.scheme != "https":
        raise _invalid("callback_url must be an https:// URL.")
    if not parts.hostname:
        raise _invalid("callback_url has no host.")
    if parts.username or parts.password:
        raise _invalid("callback_url must not carry credentials; verify the signature instead.")
    if len(url) > 2000:
        raise _invalid("callback_url is longer than 2000 characters.")
    _host_check(parts.hostname, parts.port or 443)
    try:
        parse_url(url)  # the sender's parser, which may refuse what urlsplit took
    except BadURL as error:
        raise _invalid(f"callback_url is not a valid URL: {error}.") from None
    return url


def _invalid(message: str) -> InvalidInput:
    return InvalidInput(message, field="callback_url")


def _host_check(host: str, port: int) -> None:
    try:
        address = literal_address(host)
    except AmbiguousAddress:
        raise _invalid(
            f"callback_url's host {host} is an IPv4 address written with leading zeros, "
            "in octal or hex, or with fewer than four parts, which programs read "
            "differently; write it as four decimal numbers without leading zeros, or use "
            "a host name."
        ) from None
    except ValueError:
        raise _invalid(f"callback_url's host {host} is not a valid IPv6 address.") from None
    if address is None or host_allowed(host.rstrip("."), port):
        return
    if kind := not_public(address):
        raise _invalid(
            f"callback_url points to {address}, a {kind} address; "
            "a callback is only posted to a public address."
        )


def callback_register(*, run_id: int, url: str) -> Callback:
    return Callback.objects.create(run_id=run_id, url=callback_url_check(url))


def callbacks_due() -> bool:
    """Whether any callback is due: the sender asks every second in every web process, with
    one statement and no lock, and takes them (callbacks_take_due) only when one is."""
    return one(_due_sql("c.id", lock=False), _due_params(timezone.now(), 1)) is not None


def callbacks_take_due(*, limit: int = 10) -> list[Callback]:
    """Callbacks of ended researches that are due, leased to the caller for LEASE_SECONDS."""
    now = timezone.now()
    with transaction.atomic():
        due = _callbacks().all(_due_sql(_callbacks().columns, lock=True), _due_params(now, limit))
        if due:
            Callback.objects.filter(pk__in=[c.pk for c in due]).update(
                next_attempt_at=now + timedelta(seconds=LEASE_SECONDS)
            )
    return due


# What "due" means, once, for the question and the take: not delivered, not given up, its
# research ended, its backoff over; the oldest first. Built once, not by the ORM.
@cache
def _due_sql(columns: str, *, lock: bool) -> str:
    callbacks, runs = Callback._meta.db_table, Run._meta.db_table
    skip_locked = ""
    features = connection.features
    if lock and features.has_select_for_update_skip_locked and features.has_select_for_update_of:
        skip_locked = " FOR UPDATE OF c SKIP LOCKED"  # two senders never take one row
    return (
        f"SELECT {columns} FROM {callbacks} c JOIN {runs} r ON r.id = c.run_id "
        "WHERE c.delivered_at IS NULL AND c.gave_up_at IS NULL "
        f"AND r.status IN ({placeholders(len(ENDED))}) "
        "AND (c.next_attempt_at IS NULL OR c.next_attempt_at <= %s) "
        f"ORDER BY c.id LIMIT %s{skip_locked}"
    )


def _due_params(now, limit: int) -> list:
    ended = [status.value for status in ENDED]
    return [*ended, connection.ops.adapt_datetimefield_value(now), limit]


@cache
def _callbacks() -> Instances:
    return Instances(Callback, alias="c")


def callback_delivered(*, callback: Callback) -> None:
    """Record a delivery; `callback` is the row as leased (its lease makes it ours)."""
    Callback.objects.filter(pk=callback.pk).update(
        delivered_at=timezone.now(), attempts=callback.attempts + 1, last_error=""
    )


def callback_failed(*, callback: Callback, error: str, retry: bool = True) -> None:
    """Record a failed post; try again after a backoff, or give up."""
    attempts = callback.attempts + 1
    fields = {"attempts": attempts, "last_error": error[:500]}
    if retry and attempts < settings.CALLBACK_MAX_ATTEMPTS:
        fields["next_attempt_at"] = timezone.now() + timedelta(seconds=retry_delay(attempts))
    else:
        fields["gave_up_at"] = timezone.now()
    Callback.objects.filter(pk=callback.pk).update(**fields)


def retry_delay(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones: doubling, at most an hour."""
    return min(settings.CALLBACK_RETRY_BASE_SECONDS * 2 ** (attempts - 1), 3600.0)


def signing_key() -> bytes:
    """CALLBACK_SIGNING_SECRET, or a key derived from SECRET_KEY."""
    if settings.CALLBACK_SIGNING_SECRET:
        return settings.CALLBACK_SIGNING_SECRET.encode()
    return salted_hmac("canopy.callback", "signing key").hexdigest().encode()


def signature_headers(body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    """`X-Canopy-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">`."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(signing_key(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {"X-Canopy-Signature": f"t={timestamp},v1={digest.hexdigest()}"}


def callback_payload_run(callback: Callback) -> Run:
    return Run.objects.get(pk=callback.run_id)
