"""Every link an export gives a reader opens: a knowledge-base passage, cited as kb://, links
to the passage's page in Canopy in the Markdown and Word exports from the web, as in the PDF,
in the report and in its sources; a web page keeps its address; JSON keeps the stored data,
and the CLI, which knows no site's address, keeps kb://."""

import io
import json
import re
from urllib.parse import parse_qs, urlsplit

import docx
import pytest
from django.core.management import call_command

from research.models import Dataset
from research.services.datasets import document_add
from tests.test_exports import hyperlink_targets
from tests.test_sources_naming import finished, special_document

pytestmark = pytest.mark.django_db

SITE = "http://testserver"
WEB = "https://docs.python.org/3/reference/datamodel.html"


@pytest.fixture
def special(alice):
    """A finished research citing two passages of one document (a quote, a claim, its own
    list of sources) and a web page, all seen by its agent."""
    dataset, document = special_document(alice)
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#"
    report = (
        "# Special methods\n\n## Findings\n\n"
        f"> Method 3 is looked up on the type.\n>\n> — [specialnames]({kb}0)\n\n"
        f"Method 40 is looked up on the type too ([specialnames]({kb}1)), as [the data model]"
        f"({WEB}) says.\n\nCite it as `[specialnames]({kb}0)`.\n\n"
        f"## Sources\n\n- [specialnames, passage 1]({kb}0)\n- [specialnames, passage 2]({kb}1)\n"
    )
    root = finished(alice, dataset, report, web=(WEB,))
    root.pages = f"{SITE}/kb/{dataset.pk}/documents/{document.pk}/passages/"
    root.kb = kb
    return root


def quote_of(url: str) -> str:
    return parse_qs(urlsplit(url).query).get("q", [""])[0]


def export(api, root, format: str):
    response = api.get(f"/v1/gb/research/{root.pk}/export?format={format}")
    assert response.status_code == 200, response.content[:300]
    return response.content


def test_every_kb_link_of_the_word_export_opens_the_passages_page(api, special):
    """Word opens no kb:// address: the report's citations and its sources checked were
    links nobody could follow."""
    document = docx.Document(io.BytesIO(export(api, special, "docx")))

    targets = hyperlink_targets(document)
    pages = special.pages
    assert [target.split("?")[0] for target in targets] == [
        f"{pages}0/",  # the quote's citation
        f"{pages}1/",  # the claim's
        WEB,
        f"{pages}0/",  # the report's own list of sources
        f"{pages}1/",
        f"{pages}0/",  # sources checked
        f"{pages}1/",
        WEB,
    ]
    # The passage's page highlights what the report quoted, as the page's and the PDF's do.
    assert quote_of(targets[0]) == "Method 3 is looked up on the type"
    assert quote_of(targets[1]) == "Method 40 is looked up on the type too"
    text = "\n".join(paragraph.text for paragraph in document.paragraphs)
    assert "— Special method names, passage 1 ✓" in text  # named and marked as the page does
    assert "1. Special method names, passage 1: verified, seen by the root agent" in text
    assert "specialnames" not in text.replace(f"[specialnames]({special.kb}0)", "")


def test_every_kb_link_of_the_markdown_export_from_the_web_opens_the_passages_page(api, special):
    """The report's citations and its own list of sources kept kb://; only the sources
    checked named the passage's page."""
    markdown = export(api, special, "md").decode()

    pages, kb = special.pages, special.kb
    assert re.search(
        rf"> — \[Special method names, passage 1\]\({re.escape(pages)}0/\?q=Method\+3\+", markdown
    )
    assert f"too ([Special method names, passage 2]({pages}1/?q=Method+40+is" in markdown
    assert f"[the data model]({WEB})" in markdown
    assert f"- [Special method names, passage 1]({pages}0/)\n" in markdown
    assert f"- [Special method names, passage 2]({pages}1/)\n" in markdown
    assert f"1. [Special method names, passage 1]({pages}0/): verified, seen by the root" in (
        markdown
    )
    assert f"3. [the data model]({WEB}): verified, seen by the root agent" in markdown
    # Code shows what it quotes: the one kb:// address left.
    assert f"Cite it as `[specialnames]({kb}0)`." in markdown
    assert markdown.count("kb://") == 1


def test_a_heading_with_brackets_still_links_its_passage(api, alice):
    dataset = Dataset.objects.create(owner=alice, name="Odd headings")
    document = document_add(
        dataset=dataset, title="", data=b"# Bores] and tides\n\nThe tide.", filename="more.md"
    )
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#0"
    root = finished(alice, dataset, f"# Bores\n\nThe tide comes in ([more]({kb})).")
    page = f"{SITE}/kb/{dataset.pk}/documents/{document.pk}/passages/0/"

    markdown = export(api, root, "md").decode()

    assert f"([Bores\\] and tides]({page}?q=The+tide+comes+in))" in markdown
    assert f"1. [Bores\\] and tides]({page}): verified" in markdown


def test_json_and_the_cli_keep_the_kb_addresses(api, special, tmp_path):
    """JSON is data; the CLI has no request, and no setting names the site's address."""
    document = json.loads(export(api, special, "json"))
    assert {c["url"] for c in document["citations"]} == {f"{special.kb}0", f"{special.kb}1", WEB}

    out = tmp_path / "cli.md"
    call_command("research", "export", str(special.pk), "--user", "alice", "--output", str(out))
    markdown = out.read_text()
    assert f"> — [Special method names, passage 1]({special.kb}0)" in markdown
    assert f"1. [Special method names, passage 1]({special.kb}0): verified" in markdown
    assert SITE not in markdown


def test_a_stray_backtick_or_a_bare_address_leaves_every_link_its_page_and_quote(api, alice):
    """Code was found by a pattern that ran from a stray or escaped backtick to the next one,
    paragraphs apart, and left every link between as kb://; and a bare kb:// address before
    a quoted link of the same passage took that link's quote."""
    dataset, document = special_document(alice)
    kb = f"kb://dataset/{dataset.pk}/document/{document.pk}#0"
    report = (
        f"# Keys\n\nPress the \\` key, or a ` alone. Found at {kb} first.\n\n"
        f"> Method 3 is looked up on the type.\n>\n> — [specialnames]({kb})\n\n"
        "Then `code` and the end."
    )
    root = finished(alice, dataset, report)
    page = f"{SITE}/kb/{dataset.pk}/documents/{document.pk}/passages/0/"

    markdown = export(api, root, "md").decode()
    targets = hyperlink_targets(docx.Document(io.BytesIO(export(api, root, "docx"))))

    link = re.search(r"> — \[Special method names\]\((?P<url>[^)]+)\)", markdown)
    assert link is not None, markdown
    assert link["url"].startswith(page)
    assert quote_of(link["url"]) == "Method 3 is looked up on the type"
    quoted = [url for url in targets if quote_of(url)]
    assert [quote_of(url) for url in quoted] == ["Method 3 is looked up on the type"]


def test_a_demo_source_whose_title_has_a_bracket_is_still_a_source():
    """The demo escapes a title's "]" in its Markdown, which its own pattern for a quote's
    source then read as no source: its sub-agent was called a gap."""
    from agents.llm.demo_verifier import CITED, verify_draft

    quote = "> A bore is a wave.\n>\n> — [Bores\\] and tides](kb://dataset/1/document/2#0)"
    assert CITED.findall(quote) == [("Bores\\] and tides", "kb://dataset/1/document/2#0")]
    draft = f"# Draft\n\n## From the sub-agents\n\n### tides (done)\n\n{quote}\n\n# Sources"
    assert "Gaps\nNone." in verify_draft(draft)
