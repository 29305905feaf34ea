"""Progress at a glance, as people read it: "3 of 5 agents done", "2 min 05 s".

Shared by the run page, the runs list (and its live status, `runs_progress`) and the CLI;
static/page/format.js and static/runs.js format the same way in the browser.
"""

import re
from collections.abc import Iterable

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from frontend.rendering import duration_text
from research.endings import Ending
from research.events.payloads import money
from research.models import ACTIVE_STATUSES
from research.selectors.progress import TreeProgress, roots_since, trees_progress

MAX_IDS = 100
# A research's id as a query names it: ASCII digits ("²" is a digit to str.isdigit), and not
# so many that int() refuses them.
RESEARCH_ID = re.compile(r"[0-9]{1,18}")


def elapsed_text(seconds: float | None) -> str:
    return duration_text(seconds)


def agents_done_text(done: int, total: int, word: str = "done") -> str:
    """`3 of 5 agents done`: the one wording, for the runs list, the page and the terminal.
    The run page says `ended` while an agent that ended did not end well (static/page/tiles.js)."""
    return f"{done} of {total} agent{'' if total == 1 else 's'} {word}"


def agents_text(progress: TreeProgress) -> str:
    """agents_ended_text's rule from a research's counts: the runs list's line."""
    return agents_done_text(progress.done, progress.agents, "ended" if progress.failed else "done")


def agents_ended_text(endings: Iterable[str]) -> str:
    """`3 of 5 agents done`, or `ended` once an agent that ended did not end well (a cancelled
    one is not done): the run page's rule (static/page/tiles.js), for its first paint and
    the terminal. `endings` has each agent's ending (research/endings.py), "" while it works."""
    endings = list(endings)
    ended = [ending for ending in endings if ending]
    word = "done" if all(ending == Ending.DONE for ending in ended) else "ended"
    return agents_done_text(len(ended), len(endings), word)


# A tile's words while the research waits for the analyst: its clock stopped, its agents idle
# (static/page/tiles.js says it the same way).
WAITING = "waiting for you"


def worked_words(seconds: float | None, *, paused: bool) -> str:
    """An agent's time worked, its clock stopped while the research waits for the analyst
    (static/page/tiles.js workedText says it the same way)."""
    return duration_text(seconds) + (f" · {WAITING}" if paused else "")


def worked_text(run) -> str:
    """worked_words for a run: the agent panel's first paint."""
    return worked_words(run.worked_seconds(), paused=run.status == "paused")


def messages_text(messages: list[dict]) -> str:
    """The Messages tile: the agents' messages, then the analyst's notes apart ("4 · 1 note");
    static/page/tiles.js draws the same."""
    notes = sum(1 for message in messages if message["from_analyst"])
    text = str(len(messages) - notes)
    if notes:
        text += f" · {notes} note{'' if notes == 1 else 's'}"
    return text


def header_tiles(snapshot: dict) -> dict[str, str]:
    """The run page's header tiles but its cost as static/page/tiles.js draws them from the
    same snapshot (the one the page embeds), for its first paint: the header agrees with
    itself before the script runs, and with what the script then draws."""
    runs = snapshot["runs"]
    root = next(run for run in runs if run["id"] == snapshot["root"])
    paused = root["status"] == "paused"
    working = sum(1 for run in runs if run["active"] and run["status"] != "paused")
    agents = str(len(runs))
    if paused:
        agents += f" · {WAITING}"
    elif working:
        agents += f" · {working} working"
    tokens_in = sum(run["input_tokens"] or 0 for run in runs)
    tokens_out = sum(run["output_tokens"] or 0 for run in runs)
    return {
        "tokens": f"{tokens_in:,} in · {tokens_out:,} out",
        "agents": agents,
        "progress": agents_ended_text(run["ending"] for run in runs),
        "worked": worked_words(root["worked_seconds"], paused=paused),
        "messages": messages_text(snapshot["messages"]),
    }


def progress_json(progress: TreeProgress) -> dict:
    return {
        "status": progress.status,
        "state": progress.state,
        "active": progress.status in ACTIVE_STATUSES,
        "agents": progress.agents,
        "done": progress.done,
        # The list's line, by the run page's rule: the browser ticks the time worked after it.
        "agents_text": agents_text(progress),
        "tree_cost_usd": money(progress.tree_cost_usd),
    }


@login_required
@require_GET
def runs_progress(request: HttpRequest) -> JsonResponse:
    """`/runs/progress?ids=4,7`: the live status of the user's researches on the runs list;
    with `newest=9` (the newest research when the list was drawn), also how many the user
    has started since (`newer`: from another tab, the API, the command line)."""
    raw = [part for part in request.GET.get("ids", "").split(",") if part]
    newest = request.GET.get("newest")
    if newest is not None and not RESEARCH_ID.fullmatch(newest):
        return JsonResponse({"newest": ["newest must be a research id."]}, status=400)
    if (
        (not raw and newest is None)
        or not all(RESEARCH_ID.fullmatch(part) for part in raw)
        or len(raw) > MAX_IDS
    ):
        return JsonResponse(
            {"ids": [f"ids must be 1 to {MAX_IDS} research ids separated by commas."]},
            status=400,
        )
    found = trees_progress(owner=request.user, root_ids=[int(part) for part in raw]) if raw else {}
    body: dict = {"runs": {str(pk): progress_json(p) for pk, p in found.items()}}
    if newest is not None:
        body["newer"] = roots_since(owner=request.user, newest=int(newest))
    return JsonResponse(body)
