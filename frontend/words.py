"""The words the browser's scripts say as the server does, defined once, on the server.

The pages draw their first paint on the server and their scripts redraw it live: an ending's
word ("out of time"), the badge's colour of each ending, what a paused research waits for,
the endings that read as stopped rather than failed. The scripts used to spell these again;
now every page carries them (templates/base.html, `canopy-words`, a JSON script element) and
static/page/format.js reads them there.
"""

from functools import cache
from typing import Any

from django.http import HttpRequest

from frontend.library import ENDING_LABELS
from frontend.progress import WAITING
from research import endings
from research.standing import NEEDS_ANSWERS, NEEDS_REVIEW


@cache
def page_words() -> dict[str, Any]:
    return {
        "endings": {str(ending): endings.WORDS[ending] for ending in endings.Ending},
        "tones": {str(ending): tone for ending, (_, tone) in ENDING_LABELS.items()},
        "stopped": [str(ending) for ending in endings.STOPPED],
        "needs": {"answers": NEEDS_ANSWERS, "review": NEEDS_REVIEW},
        "waiting": WAITING,
    }


def words(request: HttpRequest) -> dict[str, Any]:
    """The context processor: `canopy_words` on every page."""
    return {"canopy_words": page_words()}
