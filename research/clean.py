"""Text from users and models, made safe to store and to print in a terminal.

A topic with `\\x1b[31m` in it recolours (or worse) the terminal of whoever prints it: control
characters other than newline and tab are removed from topics, names, reasons and messages
before they are stored, and escaped wherever old text is printed (`printable`).
"""

import re
import unicodedata

# C0 controls but tab and newline, DEL, C1 controls; a carriage return ends a line.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# Letters that draw nothing: the Hangul fillers.
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")


def visible(text: str) -> bool:
    """Whether a text shows anything: a character that is not a space, a control, a format
    character (zero-width spaces, joiners, bidi controls, the byte order mark, tags), a mark
    drawn on nothing, or a filler (a topic of two zero-width spaces was a research about
    nothing)."""
    return any(
        unicodedata.category(char)[0] not in "CZ"
        and unicodedata.category(char) != "Mn"
        and char not in _FILLERS
        for char in text
    )


def strip_controls(text: str) -> str:
    """The text without control characters (a CR LF or a lone CR becomes a newline)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)


def printable(text: str) -> str:
    """The text with its control characters shown as escapes (`\\x1b`), for a terminal."""
    return _CONTROLS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def cut(text: str, limit: int, *, what: str, setting: str = "") -> str:
    """The text in at most `limit` characters, its cut marked with a note that says so (and
    which setting raises the limit). A text cut once is not cut again."""
    if limit <= 0 or len(text) <= limit:
        return text
    where = f" ({setting})" if setting else ""
    note = (
        f"\n\n[cut by Canopy: the {what} was {len(text):,} characters; "
        f"the limit is {limit:,}{where}]"
    )
    return text[: max(0, limit - len(note))] + note
