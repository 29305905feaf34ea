"""The JSON parser of the API, with a limit on nesting.

Python's json module recurses once per level: a 2 KB body of 1,000 nested arrays raised
RecursionError, a 500. No request of this API nests more than a few levels, so a body deeper
than MAX_DEPTH is refused with a 400 that says so, before it is parsed.
"""

import codecs
import re

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

MAX_DEPTH = 32
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets inside strings do
    not count)."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
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
