"""The callback sender: posts the end of each research to its `callback_url`, signed.

A thread in each web process. Every CALLBACK_POLL_SECONDS it takes the due callbacks of
ended researches (research.services.callbacks: leased, so two processes never post one at
once) and posts each on research.outbound's "callbacks" client, through the address
guard: the host is resolved, refused if any address is not public (unless
READ_PAGE_ALLOWED_HOSTS allows it), and the connection goes to a checked address, so a DNS
answer that changes cannot send the post inside the network. Redirects are not followed.
A 2xx is delivered; anything else is retried with backoff; a URL that registration would
refuse now (a row stored before the rule) and a refused address are given up at once
(trying again would not help).

One row never stops the others: whatever a delivery raises is recorded on that row, which
is retried with backoff like any failure, and the round goes on to the next. Before, one
unparsable URL aborted the round and left the rest of its batch leased, for ever.
"""

import json
import logging
import threading
import uuid

from django.conf import settings
from django.db import close_old_connections, connections

from research import outbound
from research.errors import InvalidInput
from research.models import Callback
from research.serializers import RunOutputSerializer
from research.services import callbacks as service

log = logging.getLogger(__name__)

USER_AGENT = "Canopy-Callback/1"


class CallbackSender:
    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "CallbackSender":
        self._thread = threading.Thread(target=self._loop, name="callbacks", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.wait(settings.CALLBACK_POLL_SECONDS):
            # A connection left by the previous round may have been closed by the server.
            close_old_connections()
            try:
                send_due()
            except Exception:
                log.exception("callbacks: a round failed; trying again")
        connections.close_all()


def send_due() -> int:
    """Post every due callback once; the number posted successfully."""
    delivered = 0
    if not service.callbacks_due():
        return 0
    for callback in service.callbacks_take_due():
        try:
            delivered += deliver(callback)
        except Exception as error:
            log.exception("callback of research %s: the sender failed", callback.run_id)
            _record_crash(callback, error)
    return delivered


def _record_crash(callback: Callback, error: Exception) -> None:
    reason = f"the sender failed on this callback ({type(error).__name__}: {error})."
    try:
        service.callback_failed(callback=callback, error=reason)
    except Exception:  # the database, most likely: the lease runs out and it is tried again
        log.exception("callback of research %s: its failure was not recorded", callback.run_id)


def payload(callback: Callback) -> bytes:
    run = service.callback_payload_run(callback)
    data = {
        "event": "research.finished",
        "delivery": str(uuid.uuid5(uuid.NAMESPACE_URL, f"canopy-callback-{callback.pk}")),
        "run": RunOutputSerializer(run).data,
        "flagged_claims": run.flagged_claims,
    }
    return json.dumps(data, ensure_ascii=False).encode()


def deliver(callback: Callback) -> bool:
    try:
        url = outbound.parse_url(service.callback_url_check(callback.url))
    except InvalidInput as refused:
        _give_up(callback, str(refused))
        return False
    body = payload(callback)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **service.signature_headers(body),
    }
    try:
        response = outbound.send(
            "callbacks",
            "POST",
            url,
            timeout=settings.CALLBACK_TIMEOUT_SECONDS,
            content=body,
            headers=headers,
        )
    except outbound.Refused as refused:
        _give_up(callback, f"{refused.where}; a callback is only posted to a public address.")
        return False
    except outbound.OutboundError as failure:
        return _failed(callback, _failure_text(url, failure))
    if 200 <= response.status_code < 300:
        service.callback_delivered(callback=callback)
        return True
    return _failed(callback, f"{url.host} answered {response.status_code}")


def _failure_text(url: outbound.URL, failure: outbound.OutboundError) -> str:
    """Why a post got no answer, worded for the admin; DNS may answer next time, so this is
    tried again with backoff, as every failure here is."""
    if isinstance(failure, outbound.Unresolvable):
        return f"the host {url.host} does not resolve ({failure.detail})."
    if isinstance(failure, outbound.ConnectFailed):
        return f"could not connect to {url.host}: {failure.detail}"
    if isinstance(failure, outbound.TransferFailed):
        return f"posting to {url.host} failed: {failure.kind}"
    return str(failure) or "no address answered"


def _failed(callback: Callback, error: str) -> bool:
    service.callback_failed(callback=callback, error=error)
    log.info("callback of research %s failed (%s); will retry", callback.run_id, error)
    return False


def _give_up(callback: Callback, reason: str) -> None:
    service.callback_failed(callback=callback, error=reason, retry=False)
    log.warning("callback of research %s given up: %s", callback.run_id, reason)


_sender: CallbackSender | None = None


def start_in_web_process() -> CallbackSender:
    global _sender
    if _sender is None:
        _sender = CallbackSender().start()
    return _sender
