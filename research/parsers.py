"""The JSON parser of the API, with a limit on nesting.

Python's json module recurses once per level: a 2 KB body of 1,000 nested arrays raised
RecursionError, a 500. No request of this API nests more than a few levels, so a body deeper
than MAX_DEPTH is refused with a 400 that says so, before it is parsed.

The depth check reads the body once, left to right, in time linear in its size: it holds the
GIL while it runs, so one request that took quadratic time would stall every request and
agent of the process (a 64 KB string of escaped quotes that never closed once took 15 s).
"""

import codecs
import re

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

MAX_DEPTH = 32
# A whole string (its escapes included), or a bracket, or a quote that opens a string with no
# end. The string's pattern has one way to match any text (no alternation inside a repeat) and
# gives nothing back (possessive), so a failed match costs the length it read, once.
_TOKEN = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{}]|"', re.DOTALL)


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets inside strings do
    not count)."""
    depth = deepest = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
        elif token == '"':
            # A string that never closes: everything after it is inside it, so no bracket
            # beyond it counts (the JSON parser then refuses the body for the string).
            break
    return deepest


class DepthLimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except UnicodeDecodeError as error:
            raise ParseError(f"JSON parse error - the body is not {encoding}: {error}") from None
        if json_depth(text) > MAX_DEPTH:
            raise ParseError(
                f"JSON parse error - the body nests arrays and objects more than {MAX_DEPTH} "
                "levels deep"
            )
        try:
            return json.loads(text, parse_constant=json.strict_constant if self.strict else None)
        except (ValueError, RecursionError) as error:
            raise ParseError(f"JSON parse error - {error}") from None
