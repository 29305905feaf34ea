"""Websocket frames that fit: never larger than the server's limit.

daphne closes a socket with 1011 when a message passes its limit (1 MiB by default), so a
client that only used the websocket never got past a tree with a megabyte report. A frame
over RESEARCH_WS_MAX_FRAME_BYTES is made smaller: reports are cut to an excerpt and the frame
says where the whole one is (`report_url`, REST); if a snapshot is still too large, its
messages are left out and it says where they are (`messages_url`).
"""

import json
from typing import Any

from django.conf import settings

EXCERPT_CHARS = 2000


def size(content: dict[str, Any]) -> int:
    return len(json.dumps(content).encode())


def report_url(run_id: int) -> str:
    return f"/v1/gb/research/{run_id}/report"


def fit(content: dict[str, Any], limit: int | None = None) -> dict[str, Any]:
    """The content itself when it fits, else a smaller copy that says what went where."""
    snapshot = content.get("type") == "snapshot"
    if not snapshot and "report" not in content:
        return content  # no other frame carries unbounded text: not even measured
    limit = limit or settings.RESEARCH_WS_MAX_FRAME_BYTES
    if size(content) <= limit:
        return content
    if snapshot:
        return _fit_snapshot(content, limit)
    return {**content, **_excerpt(content["report"], content["run"])}


def _excerpt(report: str, run_id: int) -> dict[str, Any]:
    return {
        "report": report[:EXCERPT_CHARS],
        "report_cut": True,
        "report_chars": len(report),
        "report_url": report_url(run_id),
    }


def _fit_snapshot(snapshot: dict[str, Any], limit: int) -> dict[str, Any]:
    runs = [
        {**run, **_excerpt(run["report"], run["id"])} if len(run["report"]) > EXCERPT_CHARS else run
        for run in snapshot["runs"]
    ]
    smaller = {**snapshot, "runs": runs}
    if size(smaller) <= limit:
        return smaller
    return {
        **smaller,
        "messages": [],
        "messages_cut": True,
        "messages_url": f"/v1/gb/research/{snapshot['root']}/messages",
    }
