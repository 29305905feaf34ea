"""A list of short texts from a model or an analyst (a plan's items, the lead's questions to
the analyst), checked one way: a list of strings, each cleaned to one line, as many as the
caller allows, none empty or over its length. Each caller names the field, the thing and the
count rule in its own words, which are the error texts its clients read."""

from research.clean import strip_controls, visible
from research.errors import InvalidInput


def one_line(text: str) -> str:
    """The text without control characters, its whitespace runs (newlines too) one space."""
    return " ".join(strip_controls(text).split())


def validate_texts(
    values: object, *, field: str, noun: str, most: int, max_chars: int, count_text: str
) -> list[str]:
    """The values cleaned to one line each, or InvalidInput on `field`: `noun` names one
    ("plan item": "plan item 2 is empty."), and `count_text` says the count rule with
    `{most}` and `{count}` in it ("a plan has 1 to {most} items, not {count}.")."""
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise InvalidInput(f"{field} must be a list of strings, one per {noun}.", field=field)
    cleaned = [one_line(value) for value in values]
    if not 1 <= len(cleaned) <= most:
        raise InvalidInput(count_text.format(most=most, count=len(cleaned)), field=field)
    for number, text in enumerate(cleaned, start=1):
        if not visible(text):
            raise InvalidInput(f"{noun} {number} is empty.", field=field)
        if len(text) > max_chars:
            raise InvalidInput(
                f"{noun} {number} is {len(text)} characters; the limit is {max_chars}.",
                field=field,
            )
    return cleaned
