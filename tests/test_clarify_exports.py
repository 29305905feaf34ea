"""The lead's questions and the analyst's answers in every export of a research (issue 27):
Markdown, PDF (printed by Chromium), DOCX (opened with python-docx) and JSON."""

import json

import pytest

from research import services
from research.models import Run
from tests.test_exports import export, opened, pdf_text

pytestmark = pytest.mark.django_db

REPORT = "# Otters in Europe\n\nRiver otters came back to the Rhine."
QUESTIONS = ["Which otters?", "For whom is the report?"]


def clarified(run_factory, *, answers, skipped=False) -> Run:
    root = run_factory(topic="Otters", clarify=True)
    Run.objects.filter(pk=root.pk).update(
        clarification={"questions": QUESTIONS, "answers": answers, "skipped": skipped}
    )
    services.run_finish(run_id=root.pk, report=REPORT)
    root.refresh_from_db()
    return root


def test_every_export_holds_the_questions_and_the_answers(api, run_factory):
    root = clarified(run_factory, answers=["River otters", ""])

    markdown = export(api, root.pk, "md").content.decode()
    pdf = pdf_text(export(api, root.pk, "pdf").content)
    paragraphs = [
        (p.style.name, p.text) for p in opened(export(api, root.pk, "docx").content).paragraphs
    ]
    data = json.loads(export(api, root.pk, "json").content)

    assert (
        "## Questions before it started\n\nThe lead asked these before it started; the "
        "analyst's answers were part of its task.\n\n1. **Which otters?** River otters\n"
        "2. **For whom is the report?** (not answered)"
    ) in markdown
    assert markdown.index("River otters came back") < markdown.index("Questions before")
    assert "Questions before it started" in pdf and "Which otters? River otters" in pdf
    assert ("Heading 2", "Questions before it started") in paragraphs
    assert ("List", "1. Which otters? River otters") in paragraphs
    assert data["runs"][0]["clarification"]["answers"] == ["River otters", ""]


def test_a_skip_is_said_and_a_research_that_asked_nothing_has_no_section(api, run_factory):
    skipped = clarified(run_factory, answers=[], skipped=True)
    plain = run_factory(topic="Badgers")
    services.run_finish(run_id=plain.pk, report="# Badgers\n\nThey dig.")

    markdown = export(api, skipped.pk, "md").content.decode()

    assert "the analyst skipped them, so it worked from the topic as written" in markdown
    assert "1. **Which otters?** (skipped)" in markdown
    assert "Questions before" not in export(api, plain.pk, "md").content.decode()


def test_an_answer_reads_as_written_in_markdown_not_as_markup(api, run_factory):
    """An answer of `<img src=x onerror=alert(1)> **not bold**` went into the Markdown
    export raw: a viewer drew it as HTML and bold, where the report's title escaped it."""
    from research.markdown import markdown as parser
    from research.markdown import sanitize

    answer = "<img src=x onerror=alert(1)> **not bold**\n# not a heading, see https://a.org/x_y"
    root = clarified(run_factory, answers=[answer, "__init__ & co"])

    exported = export(api, root.pk, "md").content.decode()

    assert (
        "1. **Which otters?** \\<img src=x onerror=alert(1)\\> \\*\\*not bold\\*\\* \\# not a "
        "heading, see https://a.org/x_y\n2. **For whom is the report?** \\_\\_init\\_\\_ \\& co"
    ) in exported
    section = exported[exported.index("## Questions") : exported.index("---")]
    shown = sanitize(parser().render(section))
    assert "<img" not in shown and "<h1>" not in shown and "<strong>not bold" not in shown
    assert "&lt;img src=x onerror=alert(1)&gt; **not bold** # not a heading" in shown
    assert "__init__ &amp; co" in shown
