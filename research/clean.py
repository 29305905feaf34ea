"""Text from users and models, made safe to store and to print in a terminal.

A topic with `\\x1b[31m` in it recolours (or worse) the terminal of whoever prints it: control
characters other than newline and tab are removed from topics, names, reasons and messages
before they are stored, and escaped wherever old text is printed (`printable`).
"""

import re

# C0 controls but tab and newline, DEL, C1 controls; a carriage return ends a line.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# Marks nobody sees: the soft hyphen, zero-width spaces, joiners and marks, the word joiner
# and invisible operators, the byte order mark.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]")


def visible(text: str) -> bool:
    """Whether a text shows anything: not only spaces, controls and invisible marks (a topic
    of two zero-width spaces was a research about nothing)."""
    return bool(_INVISIBLE.sub("", strip_controls(text)).strip())


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
