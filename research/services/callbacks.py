"""Callbacks: a research may carry an HTTPS URL that gets a signed POST when it ends.

The rows are an outbox: `callback_register` stores the URL with the research; the sender
(agents/callbacks.py, in each web process) takes the callbacks of ended researches that are
due, one process per row at a time, posts, and records the outcome here, retrying with
exponential backoff until CALLBACK_MAX_ATTEMPTS. A crash between a post and its record
means one more post, never none: receivers dedupe on the delivery id.
"""

import hashlib
import hmac
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac

from research.errors import InvalidInput
from research.models import Callback, Run, Status

ENDED = (Status.DONE, Status.FAILED)
LEASE_SECONDS = 120  # longer than one post may take: the row is not posted twice at once


def callback_url_check(url: str) -> str:
    """The URL's shape: https, a host, no credentials. Where it points (no private address)
    is checked by the sender's address guard at each delivery, as DNS may change."""
    from urllib.parse import urlsplit

    url = (url or "").strip()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        raise InvalidInput(
            f"callback_url is not a valid URL: {url!r}.", field="callback_url"
        ) from None
    if parts.scheme != "https":
        raise InvalidInput("callback_url must be an https:// URL.", field="callback_url")
    if not parts.hostname:
        raise InvalidInput("callback_url has no host.", field="callback_url")
    if parts.username or parts.password:
        raise InvalidInput(
            "callback_url must not carry credentials; verify the signature instead.",
            field="callback_url",
        )
    if len(url) > 2000:
        raise InvalidInput("callback_url is longer than 2000 characters.", field="callback_url")
    return url


def callback_register(*, run_id: int, url: str) -> Callback:
    return Callback.objects.create(run_id=run_id, url=callback_url_check(url))


def callbacks_take_due(*, limit: int = 10) -> list[Callback]:
    """Callbacks of ended researches that are due, leased to the caller for LEASE_SECONDS."""
    now = timezone.now()
    with transaction.atomic():
        due = list(
            Callback.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(delivered_at__isnull=True, gave_up_at__isnull=True, run__status__in=ENDED)
            .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
            .order_by("id")[:limit]
        )
        Callback.objects.filter(pk__in=[c.pk for c in due]).update(
            next_attempt_at=now + timedelta(seconds=LEASE_SECONDS)
        )
    return due


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
