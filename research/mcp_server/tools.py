"""The MCP tools: start, list, get, follow, read the report of, and cancel researches.

Each tool is a thin edge, like a REST view: it checks its arguments, calls a selector or a
service as the client's user, and returns JSON. A domain error becomes an MCP tool error
(`isError: true`) whose text is the REST API's text for the same input, so an assistant reads
what a script reads. The descriptions and argument descriptions are what a model reads to
pick a tool and fill it in: they say what the tool does, when to use it and what comes back.

Who the user is depends on the transport: `owner_of(ctx)` is given by the caller (the
bearer token's user over HTTP, `--user` over stdio).

More tools plug in through `register`: `send_note` is the analyst's note to a working agent,
as `POST /v1/gb/research/<id>/notes` sends it; `plans` reads and approves a research's plan.
"""

import json
from collections.abc import Callable
from functools import partial
from importlib.metadata import version
from typing import Annotated, Any, Literal

import anyio
from django.contrib.auth.models import AbstractBaseUser
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field
from rest_framework.exceptions import ValidationError

from research import selectors, services
from research.api_helpers import checked
from research.errors import InvalidInput, ResearchError
from research.mcp_server.answers import (
    Refused,
    as_owner,
    cursor_run,
    error_result,
    listed,
    progress_line,
    research_of,
    result_of,
    validation_text,
)
from research.mcp_server.clarify import ClarifyTools
from research.mcp_server.plans import PlanTools
from research.mcp_server.server import CanopyServer
from research.mcp_server.threads import run_sync
from research.models import ACTIVE_STATUSES, Status
from research.ops.throttles import NotesThrottle, throttle_check
from research.serializers import MessageSerializer, ReportSerializer, RunListFilterSerializer

TITLE = "Canopy deep research"
VERSION = version("canopy")  # the installed package's: a client shows and logs it
INSTRUCTIONS = (
    "Canopy runs deep research with a tree of LLM agents: a research agent searches the web "
    "and the user's knowledge bases, may split the work among sub-agents, and writes a "
    "report that cites its sources, in minutes. Start one with start_research, wait for it "
    "with follow_research (it reports progress), then read the report and its citations with "
    "get_report. list_research finds researches; get_research shows one and its sub-agents. "
    "One started with review_plan waits for its plan: read it with get_plan, then approve_plan."
)

FOLLOW_POLL_SECONDS = 0.5
FOLLOW_MAX_SECONDS = 3600
# A progress notification at least this often while nothing changes: the client (and any
# proxy between) sees the call is alive; MCP clients give up on a silent stream (300 s).
FOLLOW_HEARTBEAT_SECONDS = 20
PAGE_SIZE_MAX = 200
ResearchId = Annotated[
    int, Field(description="The id of a research (or of one of its sub-agents).")
]
OwnerOf = Callable[[Context], int]


def build_server(
    *, owner_of: OwnerOf, on_started: Callable[[int], None] | None = None
) -> MCPServer:
    """Canopy's MCP server. `owner_of(ctx)` names the user a call acts for; `on_started(id)`
    runs after a research is queued (the stdio command runs its agents when none would)."""
    server = CanopyServer(
        "canopy", title=TITLE, version=VERSION, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    register(server, Tools(owner_of=owner_of, on_started=on_started))
    return server


def register(server: MCPServer, tools: "Tools") -> None:
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    server.add_tool(tools.start_research, name="start_research")
    server.add_tool(tools.list_research, name="list_research", annotations=reads)
    server.add_tool(tools.get_research, name="get_research", annotations=reads)
    server.add_tool(tools.follow_research, name="follow_research", annotations=reads)
    server.add_tool(tools.get_report, name="get_report", annotations=reads)
    server.add_tool(tools.send_note, name="send_note")
    cancels = ToolAnnotations(destructive_hint=True, idempotent_hint=True)
    server.add_tool(tools.cancel_research, name="cancel_research", annotations=cancels)
    server.add_tool(tools.resume_research, name="resume_research")
    PlanTools(call=tools.call, on_started=tools.on_started).register(server, reads=reads)
    ClarifyTools(call=tools.call, on_started=tools.on_started).register(server)


class Tools:
    def __init__(self, *, owner_of: OwnerOf, on_started: Callable[[int], None] | None):
        self.owner_of = owner_of
        self.on_started = on_started

    async def _answer(self, ctx: Context, work: Callable[[AbstractBaseUser], Any]) -> Any:
        """`work(owner)` in a daemon thread (`threads` says why); a refusal raises `Refused`."""
        try:
            return await run_sync(partial(as_owner, work, self.owner_of(ctx)))
        except ResearchError as error:
            raise Refused(error.message) from None
        except ValidationError as error:
            raise Refused(validation_text(error.detail)) from None

    async def start_research(
        self,
        topic: Annotated[
            str,
            Field(
                description="The research question or task, self-contained: what to find "
                "out, for whom, and any scope or sources to prefer."
            ),
        ],
        ctx: Context,
        max_steps: Annotated[
            int | None,
            Field(
                description="The root agent's step budget (model turns), 1 to the server's "
                "limit (40 by default). Omit for the default (10). More steps: deeper, "
                "slower, costlier."
            ),
        ] = None,
        dataset: Annotated[
            int | None,
            Field(
                description="The id of one of the user's datasets (knowledge bases) for the "
                "agents to query beside the web. Omit for none."
            ),
        ] = None,
        review_plan: Annotated[
            bool,
            Field(
                description="Pause after the lead agent writes its plan, until it is approved "
                "(approve_plan, or the user in Canopy). Default false."
            ),
        ] = False,
        clarify: Annotated[
            bool,
            Field(
                description="Let the lead agent first ask up to three short questions; the "
                "research waits for the answers (answer_questions). Default false."
            ),
        ] = False,
        callback_url: Annotated[
            str,
            Field(
                description="An https URL that gets a signed POST when the research ends "
                "(see Canopy's docs for the signature). Omit for none."
            ),
        ] = "",
        follows: Annotated[
            int | None,
            Field(
                description="The id of one of the user's done researches to follow up: the "
                "new one starts from its report, plan and verified sources (a thread), on its "
                "dataset unless `dataset` says otherwise. Omit for a new thread."
            ),
        ] = None,
    ) -> CallToolResult:
        """Start a new research in the background and return it at once (status "queued").
        The agents then work for minutes: call follow_research with its id to wait for it
        with progress, then get_report to read the report. A user may have 3 researches
        working at once; a fourth is refused until one ends or is cancelled."""

        def start(owner: AbstractBaseUser) -> dict:
            run = services.run_start(
                owner=owner,
                topic=topic,
                max_steps=max_steps,
                dataset_id=dataset,
                review_plan=review_plan,
                clarify=clarify,
                callback_url=callback_url,
                follows_id=follows,
            )
            if self.on_started is not None:
                self.on_started(run.pk)
            return listed(run)

        return await self.call(ctx, start)

    async def list_research(
        self,
        ctx: Context,
        status: Annotated[
            Literal["queued", "working", "paused", "done", "failed"] | None,
            Field(description="Only researches with this status."),
        ] = None,
        parent_id: Annotated[
            int | None,
            Field(description="List the sub-agents this run spawned instead of researches."),
        ] = None,
        root_id: Annotated[
            int | None,
            Field(description="List every agent of this research's tree instead."),
        ] = None,
        cursor: Annotated[
            str | None,
            Field(description="The next_cursor of the previous page, for the next page."),
        ] = None,
        page_size: Annotated[
            int, Field(description=f"At most this many, 1 to {PAGE_SIZE_MAX} (default 20).")
        ] = 20,
    ) -> CallToolResult:
        """List the user's researches, newest first, without their reports (get_report
        reads one). Without parent_id or root_id it lists researches the user started, not
        their sub-agents. When more remain, next_cursor is set: pass it as cursor."""

        def listing(owner: AbstractBaseUser) -> dict:
            given = {"status": status, "parent_id": parent_id, "root_id": root_id}
            filters = checked(
                RunListFilterSerializer, {k: v for k, v in given.items() if v is not None}
            )
            if not 1 <= page_size <= PAGE_SIZE_MAX:
                raise InvalidInput(
                    f"page_size must be from 1 to {PAGE_SIZE_MAX}, not {page_size}.",
                    field="page_size",
                )
            runs = selectors.run_list(
                owner=owner, **filters, roots_only=parent_id is None and root_id is None
            )
            if cursor:
                runs = selectors.runs_older_than(runs, run=cursor_run(owner, cursor))
            else:
                runs = runs.order_by("-created_at", "-id")
            page = list(runs[: page_size + 1])
            more, page = len(page) > page_size, page[:page_size]
            return {
                "researches": [listed(run) for run in page],
                "next_cursor": f"before-{page[-1].pk}" if more else None,
            }

        return await self.call(ctx, listing)

    async def get_research(self, research_id: ResearchId, ctx: Context) -> CallToolResult:
        """One research (or sub-agent) as it is now: status, state, step count, tokens and
        cost (cost_usd its own, tree_cost_usd with its sub-agents), and `agents`: every
        sub-agent below it with its state, steps and cost. The report is read with
        get_report."""
        return await self.call(ctx, partial(research_of, research_id=research_id))

    async def follow_research(
        self,
        research_id: ResearchId,
        ctx: Context,
        timeout_seconds: Annotated[
            int,
            Field(
                description="Return after this many seconds even if the research still "
                f"works (1 to {FOLLOW_MAX_SECONDS}, default 240); call again to keep waiting."
            ),
        ] = 240,
    ) -> CallToolResult:
        """Wait until a research ends, sending progress notifications (agents working,
        steps, cost, what the agents do) while it works when the client asked for progress.
        Returns what get_research returns, with `finished`: false when the wait timed out
        first. A research started with review_plan returns as soon as it waits for the user
        to approve its plan (status "paused", `awaiting_review`: true): show it with get_plan,
        approve it with approve_plan once the user agrees, then follow it again. One started
        with clarify returns likewise when its lead asks (state "clarifying", the questions in
        `clarification`): ask the user, answer with answer_questions, follow it again."""
        if not 1 <= timeout_seconds <= FOLLOW_MAX_SECONDS:
            return error_result(
                f"timeout_seconds must be from 1 to {FOLLOW_MAX_SECONDS}, not {timeout_seconds}."
            )
        deadline = anyio.current_time() + timeout_seconds
        sent, last_line, last_sent = 0, None, 0.0
        try:
            while True:
                research = await self._answer(ctx, partial(research_of, research_id=research_id))
                finished = research["status"] not in ACTIVE_STATUSES
                awaiting_review = research["status"] == Status.PAUSED
                line = progress_line(research)
                now = anyio.current_time()
                if line != last_line or now - last_sent >= FOLLOW_HEARTBEAT_SECONDS:
                    sent += 1  # the progress value must grow with every notification
                    await ctx.report_progress(sent, None, line)
                    last_line, last_sent = line, now
                if finished or awaiting_review or anyio.current_time() >= deadline:
                    return result_of(
                        {**research, "finished": finished, "awaiting_review": awaiting_review}
                    )
                await anyio.sleep(FOLLOW_POLL_SECONDS)
        except Refused as refused:
            return error_result(str(refused))

    async def get_report(self, research_id: ResearchId, ctx: Context) -> CallToolResult:
        """The report of a research (Markdown, empty until it is done) with each URL it
        cites, marked verified (an agent of the research read it) or flagged (no agent saw
        it: check it before trusting it)."""

        def report(owner: AbstractBaseUser) -> dict:
            run = selectors.run_get(owner=owner, run_id=research_id)
            data = ReportSerializer(selectors.report_of(run=run)).data
            return json.loads(json.dumps(data))  # as GET /v1/gb/research/<id>/report shows it

        return await self.call(ctx, report)

    async def cancel_research(self, research_id: ResearchId, ctx: Context) -> CallToolResult:
        """Cancel a research (or one sub-agent) and every sub-agent below it. Its agents stop
        within a second or two; it then ends "failed" with the error "cancelled by the
        user" and the ending "cancelled". Returns the research as it is right after the request;
        an error for one that has already ended."""

        def cancel(owner: AbstractBaseUser) -> dict:
            run = selectors.run_get(owner=owner, run_id=research_id)
            services.run_cancel_asked(run=run)
            run.refresh_from_db()
            return listed(run)

        return await self.call(ctx, cancel)

    async def resume_research(self, research_id: ResearchId, ctx: Context) -> CallToolResult:
        """Resume a research that was interrupted (its worker lost, the server stopped, its
        model endpoint failing): every agent that had not ended goes on from its last
        completed step, and no completed step is paid for twice. Refused for a research that
        ended done, was cancelled, or still works. Returns the research, queued again."""

        def resume(owner: AbstractBaseUser) -> dict:
            run = selectors.run_get(owner=owner, run_id=research_id)
            services.research_resume(run=run)
            run.refresh_from_db()
            return listed(run)

        return await self.call(ctx, resume)

    async def send_note(
        self,
        research_id: ResearchId,
        text: Annotated[
            str,
            Field(
                description="What the agent should know or do, short and specific, at most "
                "10,000 characters."
            ),
        ],
        ctx: Context,
    ) -> CallToolResult:
        """Send a note to an agent of a research that is still working: the research's id
        for its lead agent, or a sub-agent's id (see get_research). The agent reads it at its
        next step; an agent waiting for its sub-agents or for messages stops waiting to read
        it. Returns the stored note. A note to an agent that has ended is refused."""

        def send(owner: AbstractBaseUser) -> dict:
            run = selectors.run_get(owner=owner, run_id=research_id)
            throttle_check(NotesThrottle, owner)
            note = services.note_send(run=run, author_id=owner.pk, text=text)
            return json.loads(json.dumps(MessageSerializer(note).data))

        return await self.call(ctx, send)

    async def call(self, ctx: Context, work: Callable[[AbstractBaseUser], Any]):
        try:
            return result_of(await self._answer(ctx, work))
        except Refused as refused:
            return error_result(str(refused))
