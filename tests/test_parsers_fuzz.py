"""Fuzzing the parsers Canopy writes itself with hypothesis (issue 22): the JSON depth check,
the plan and note checks, the URL check, the verifier's answer, report citations, page text
and control characters. Each property says what the parser promises for any input; the runs
are bounded (examples and a deadline per example) so `make test` stays quick and repeatable
(derandomized: the same examples on every run)."""

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ParseError

from agents.loop.review import parse_verdict
from agents.tools.base import ToolError
from agents.tools.pages import parse_url
from research.clean import strip_controls
from research.errors import InvalidInput
from research.parsers import MAX_DEPTH, DepthLimitedJSONParser, json_depth
from research.services.citations import cited_urls
from research.services.plans import validate_plan_items
from research.text import visible_text

FUZZ = settings(max_examples=300, deadline=1000, derandomize=True, database=None)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)


def depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@FUZZ
@given(json_values, st.booleans())
def test_json_depth_is_the_nesting_of_any_json_value(value, ascii_only):
    # Strings full of brackets, quotes and backslashes do not count; only structure does.
    assert json_depth(json.dumps(value, ensure_ascii=ascii_only)) == depth(value)


@FUZZ
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_the_json_parser_refuses_any_body_with_a_parse_error_or_parses_it(body):
    try:
        DepthLimitedJSONParser().parse(io.BytesIO(body), parser_context={"encoding": "utf-8"})
    except ParseError as error:
        assert str(error.detail).startswith("JSON parse error - ")


@FUZZ
@given(st.integers(min_value=MAX_DEPTH + 1, max_value=3 * MAX_DEPTH), st.sampled_from("[{"))
def test_the_json_parser_refuses_nesting_past_the_limit_by_name(levels, opening):
    closing = {"[": "]", "{": "}"}[opening]
    inner = "[" * levels + "]" * levels
    body = inner if opening == "[" else '{"a": ' * levels + "1" + closing * levels
    with pytest.raises(ParseError, match="more than 32 levels deep"):
        DepthLimitedJSONParser().parse(io.BytesIO(body.encode()), parser_context={})


@FUZZ
@given(json_values)
def test_plan_items_are_clean_distinct_lines_or_a_sentence_naming_the_field(items):
    try:
        cleaned = validate_plan_items(items)
    except InvalidInput as error:
        assert error.field == "items" and error.message.endswith(".")
        return
    assert cleaned and len(set(cleaned)) == len(cleaned)
    assert all(item == " ".join(item.split()) and item for item in cleaned)


@FUZZ
@given(st.lists(st.text(max_size=40), min_size=1, max_size=12))
def test_plan_items_keep_the_words_of_every_item_in_order(items):
    try:
        cleaned = validate_plan_items(items)
    except InvalidInput:
        return
    assert cleaned == [" ".join(strip_controls(item).split()) for item in items]


@FUZZ
@given(st.text(max_size=200))
def test_stored_text_has_no_control_character_but_newline_and_tab(text):
    cleaned = strip_controls(text)
    assert all(char in "\n\t" or not (ord(char) < 32 or 127 <= ord(char) < 160) for char in cleaned)
    assert strip_controls(cleaned) == cleaned


@FUZZ
@given(st.text(max_size=120))
def test_a_url_the_model_gives_is_an_http_url_with_a_host_or_a_tool_error(raw):
    try:
        url = parse_url(raw)
    except ToolError as error:
        assert str(error).startswith("read_page: ")
        return
    assert url.scheme in ("http", "https") and url.host


@FUZZ
@given(
    st.from_regex(r"https?://[a-z]{1,12}\.(org|com)(/[a-z0-9_-]{0,12}){0,3}", fullmatch=True),
    st.text(alphabet=st.characters(blacklist_characters="[]\n"), max_size=30),
)
def test_a_markdown_link_in_a_report_is_cited_with_its_url(url, title):
    cited = cited_urls(f"Some claim [{title}]({url}). More text.")
    assert [entry.url for entry in cited] == [url]


@FUZZ
@given(st.text(max_size=300))
def test_any_report_gives_cited_urls_with_a_scheme(report):
    assert all("://" in entry.url for entry in cited_urls(report))


claims = st.lists(
    st.text(alphabet=st.characters(blacklist_characters='\n"“”«»', blacklist_categories=["Cc"]))
    .map(lambda text: " ".join(text.split()))
    .filter(lambda text: text and not text.lower().startswith(("none", "(none"))),
    max_size=5,
)


@FUZZ
@given(claims)
def test_a_verifier_answer_gives_back_every_claim_it_lists(listed):
    bullets = "\n".join(f'- "{claim}": no source says so' for claim in listed) or "None."
    answer = f"# Verification\n\n## Unsupported claims\n{bullets}\n\n## Gaps\nNone.\n"

    verdict = parse_verdict(answer)

    assert verdict.error == ""
    assert [claim["claim"] for claim in verdict.claims] == [claim.strip() for claim in listed]


@FUZZ
@given(st.text(max_size=400))
def test_any_verifier_answer_is_a_verdict_or_says_what_it_lacks(answer):
    verdict = parse_verdict(answer)
    assert verdict.claims or verdict.error or "unsupported" in answer.lower()


@FUZZ
@given(st.text(alphabet=st.characters(whitelist_categories=["L", "N"]), min_size=1, max_size=20))
def test_the_words_of_a_paragraph_are_visible_text_and_its_script_is_not(word):
    markup = f"<p>{word}</p><script>var hidden = 1;</script><p>after</p>"
    assert visible_text(markup) == f"{word}\nafter"
