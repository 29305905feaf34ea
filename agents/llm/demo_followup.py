"""The demo model's follow-ups: it reads the earlier research its task carries (research.
selectors.followups writes it) and quotes the carried sources that bear on the new question,
citing them by the URLs they were given under, so the citations verify without a new read."""

import re

from research.selectors.followups import HEADING
from research.text import STOP_WORDS

SOURCE = re.compile(
    r"^\[\d+\] (?P<title>.+?) \((?P<url>(?:kb|https?)://[^)\s]+)\)\n(?P<text>.+)$", re.M
)
EARLIER = re.compile(r"an earlier research of the analyst \(run (?P<id>\d+)\): \"(?P<topic>.*?)\"")
SENTENCE = re.compile(r"[A-Z][^.!?]{30,300}[.!?]")
QUOTES_MAX = 3


def split_task(task: str) -> tuple[str, str]:
    """The follow-up question, and the earlier research after it ("" for a new research)."""
    question, found, context = task.partition(f"\n\n{HEADING}")
    return (question, found + context) if found else (task, "")


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP_WORDS}


def earlier_section(context: str, question: str, *, quoted: set[str]) -> list[str]:
    """The report's section on what the earlier research's sources say about the question:
    the best sentence of each carried source not `quoted` already, those sharing most words
    with it first."""
    earlier = EARLIER.search(context)
    if earlier is None:
        return []
    wanted = _words(question)
    scored = []
    for order, source in enumerate(SOURCE.finditer(context)):
        if source.group("url") in quoted:
            continue
        # A heading's underline (reStructuredText's ****) ends its title, as a full stop.
        text = re.sub(r"[*=~^-]{3,}", ". ", source.group("text"))
        sentences = SENTENCE.findall(text)
        if not sentences:  # a title or code: nothing to quote
            continue
        best = max(sentences, key=lambda sentence: len(wanted & _words(sentence)))
        scored.append((-len(wanted & _words(best)), order, best.strip(), source))
    lines = [
        "",
        "## From the earlier research",
        "",
        f"This follows up research {earlier.group('id')}, “{earlier.group('topic')}”. What the "
        "sources it verified say on this question (carried over, not fetched again):",
        "",
    ]
    quotes = [
        f"> {sentence}\n>\n> — [{source.group('title')}]({source.group('url')})"
        for _, _, sentence, source in sorted(scored, key=lambda item: item[:2])[:QUOTES_MAX]
    ]
    if not quotes:
        quotes = ["Its sources add nothing to the findings above." if quoted else "It cited none."]
    return lines + "\n\n".join(quotes).split("\n")
