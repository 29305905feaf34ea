"""Exports of a research, one code path for the API, the run page's buttons and the CLI:
the report as Markdown, the whole tree as JSON (`frontend.terminal.export`), the report
as PDF, printed by headless Chromium from a print stylesheet so the citation marks and the
sources list look as they do on the page, and the report as DOCX (`frontend.export_docx`), for
analysts who edit it in Word: real headings, lists and hyperlinks.

`GET /v1/gb/research/<id>/export?format=md|json|pdf|docx` answers the file as an attachment.
Every export counts against THROTTLE_EXPORTS. Each PDF runs a Chromium, so a web process
prints at most EXPORT_PDF_SLOTS at once, and one user holds at most EXPORT_PDF_PER_USER of
them: a PDF past that share is a 429 at once, so one user's flood does not queue everyone
else's PDF behind it (`PdfSlots`).
"""

import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from frontend.clarify_export import HEADING as CLARIFY_HEADING
from frontend.clarify_export import asked
from frontend.passages import cited_names, passage_href
from frontend.rendering import PassageLink, render_report, titled_passages
from frontend.terminal.export import (
    export_json,
    export_markdown,
    export_titles,
    provenance,
)
from research import selectors, standing
from research.models import Citation, Run
from research.ops.throttles import ExportThrottle

FORMATS = ("md", "json", "pdf", "docx")
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# About one PDF's printing time: when a refused PDF may ask again.
PDF_RETRY_SECONDS = 3
# How long a PDF within its user's share waits for a free printer before a 503.
PDF_QUEUE_SECONDS = 30


class ExportError(Exception):
    """The export cannot be made; `status` is the HTTP answer, `message` says why, and
    `retry_after` (seconds) when it may be asked again."""

    def __init__(self, message: str, status: int, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after


class PdfSlots:
    """This process's PDF printers, and each user's share of them.

    A user past their share (EXPORT_PDF_PER_USER, read on each call) is refused before
    waiting, so their extra requests neither hold a request thread nor stand in the queue
    of the printers; a request within its share waits for a printer, PDF_QUEUE_SECONDS at
    most. The share is counted before the printer is waited for: a user's queued PDF counts.
    """

    def __init__(self, slots: int) -> None:
        self._printers = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self._held: Counter[int] = Counter()

    @contextmanager
    def hold(self, user_id: int) -> Iterator[None]:
        share = settings.EXPORT_PDF_PER_USER
        with self._lock:
            if (held := self._held[user_id]) >= share:
                raise ExportError(
                    f"you are already printing {held} PDF{'s' if held != 1 else ''} "
                    f"(at most {share} at once): try again when it is done.",
                    429,
                    PDF_RETRY_SECONDS,
                )
            self._held[user_id] += 1
        try:
            if not self._printers.acquire(timeout=PDF_QUEUE_SECONDS):
                raise ExportError("every PDF printer is busy: try again.", 503, PDF_RETRY_SECONDS)
            try:
                yield
            finally:
                self._printers.release()
        finally:
            with self._lock:
                self._held[user_id] -= 1
                if not self._held[user_id]:
                    del self._held[user_id]


pdf_slots = PdfSlots(settings.EXPORT_PDF_SLOTS)


@dataclass(frozen=True)
class Export:
    content: bytes
    content_type: str
    filename: str


def export_run(run: Run, format: str, *, site: str = "") -> Export:
    """The run exported in `format` (md, json, pdf or docx). With `site` (the address the
    export was asked for at, "https://canopy.example.org"), a knowledge-base source links to
    the page of Canopy's that shows its passage, as the run page does, in every format but
    JSON (data, whose addresses are the stored ones); without it (the CLI: no setting names
    the site's address, ALLOWED_HOSTS has no scheme and may list several) it keeps its kb://
    address, which nothing outside Canopy opens."""
    name = f"canopy-research-{run.pk}"
    if format == "json":
        return Export(export_json(run).encode(), "application/json", f"{name}.json")
    if not run.report:
        what = "no report yet" if run.is_active else "no report"
        raise ExportError(
            f"research {run.pk} has {what}: it {standing.said(run)}; export it as json.",
            status=409,
        )
    if format == "md":
        markdown = export_markdown(run, passage_link=_passage_link(site))
        return Export(markdown.encode(), "text/markdown; charset=utf-8", f"{name}.md")
    if format == "pdf":
        return Export(export_pdf(run, site=site), "application/pdf", f"{name}.pdf")
    if format == "docx":
        # python-docx takes a fifth of a second to import: at the first export, not at start.
        from frontend.export_docx import export_docx

        return Export(export_docx(run, passage_link=_passage_link(site)), DOCX, f"{name}.docx")
    raise ExportError(f"format must be one of {', '.join(FORMATS)}, not {format!r}.", 400)


def _passage_link(site: str) -> PassageLink | None:
    """kb:// address and quote -> the passage page's absolute URL, or None without a site."""
    if not site:
        return None

    def link(url: str, quote: str = "") -> str | None:
        path = passage_href(url, quote)
        return f"{site.rstrip('/')}{path}" if path else None

    return link


def print_html(run: Run, *, site: str = "") -> str:
    """The report as a self-contained HTML document with a print stylesheet, its passages
    named as the run page names them; with `site`, each kb:// link opens the passage's page
    there, since no PDF reader opens kb://."""
    citations = selectors.subtree_citations(run=run, subtree=False)
    titles = export_titles(run, citations)
    link = _passage_link(site)
    report_html = render_report(
        titled_passages(run.report, titles), citations, run.flagged_claims, passage_link=link
    )
    sources = [
        PrintedSource(
            citation, name, (link and link(citation.url)) or citation.url, provenance(citation)
        )
        for citation, name in zip(citations, cited_names(citations, titles), strict=True)
    ]
    return render_to_string(
        "export/print.html",
        {
            "run": run,
            "report_html": report_html,
            "sources": sources,
            "asked": asked(run),
            "asked_heading": CLARIFY_HEADING,
            "agents": len(selectors.subtree_runs(run=run)),
            "printed_at": timezone.now(),
        },
    )


@dataclass(frozen=True)
class PrintedSource:
    """A source as the printed list shows it: its name, the address a reader can open, and
    who saw it, in the words of the other exports."""

    citation: Citation
    name: str
    href: str
    provenance: str


def export_pdf(run: Run, *, site: str = "") -> bytes:
    if not os.access(settings.PDF_CHROMIUM_PATH, os.X_OK):
        raise ExportError(
            f"PDF export needs Chromium at {settings.PDF_CHROMIUM_PATH} (PDF_CHROMIUM_PATH); "
            "md and json exports work without it.",
            503,
        )
    html = print_html(run, site=site)
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover  (playwright is a dependency)
        raise ExportError("PDF export needs the playwright package.", 503) from None
    # Only the run's owner may export it: their share is the one spent.
    with pdf_slots.hold(run.owner_id), sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(
                executable_path=settings.PDF_CHROMIUM_PATH, args=CHROMIUM_FLAGS
            )
        except PlaywrightError as error:
            raise ExportError(f"PDF export: Chromium did not start: {error.message}", 503) from None
        try:
            page = browser.new_page()
            # The document is whole: nothing is fetched while printing it.
            page.route("**/*", lambda route: route.abort())
            page.set_content(html, wait_until="load")
            return page.pdf(format="A4", print_background=True, outline=True)
        finally:
            browser.close()


class _FormatIsAParameter(BaseContentNegotiation):
    """`?format=` names the export, not one of DRF's renderers: errors are JSON."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class RunExportView(APIView):
    renderer_classes = [JSONRenderer]
    content_negotiation_class = _FormatIsAParameter
    throttle_classes = [ExportThrottle]

    @extend_schema(
        operation_id="research_export",
        parameters=[OpenApiParameter("format", str, enum=list(FORMATS), description="default md")],
        responses={
            (200, "text/markdown"): OpenApiResponse(
                OpenApiTypes.STR, description="the report and its sources"
            ),
            (200, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT, description="the whole tree"
            ),
            (200, "application/pdf"): OpenApiResponse(
                OpenApiTypes.BINARY, description="the report, printed"
            ),
            (200, DOCX): OpenApiResponse(
                OpenApiTypes.BINARY, description="the report as a Word document, with its sources"
            ),
            409: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="the research has no report yet (md, pdf, docx): export it as json",
            ),
        },
    )
    def get(self, request: Request, run_id: int) -> HttpResponse:
        format = request.query_params.get("format", "md")
        if format not in FORMATS:
            raise ValidationError(
                {"format": [f"format must be one of {', '.join(FORMATS)}, not {format!r}."]}
            )
        run = selectors.run_get(owner=request.user, run_id=run_id)
        try:
            export = export_run(run, format, site=request.build_absolute_uri("/").rstrip("/"))
        except ExportError as error:
            failure = APIException(error.message)
            failure.status_code = error.status
            failure.wait = error.retry_after  # DRF's handler: the Retry-After header
            raise failure from None
        response = HttpResponse(export.content, content_type=export.content_type)
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        return response


run_export = RunExportView.as_view()
