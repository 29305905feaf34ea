"""The MCP tool of the clarify step (issue 27): answer the questions a research's lead asked
before it started, or skip them (`answer_questions`), as POST /v1/gb/research/<id>/clarify
does. follow_research returns once the lead asks (status "paused", state "clarifying", the
questions in `clarification`); the assistant asks the user and answers with this tool."""

from collections.abc import Callable
from typing import Annotated

from django.contrib.auth.models import AbstractBaseUser
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from research import selectors, services
from research.mcp_server.answers import research_of
from research.mcp_server.plans import Call, RootId
from research.services.clarify import ANSWER_MAX_CHARS

Answers = Annotated[
    list[str] | None,
    Field(
        description='The user\'s answers, one string per question in the order asked ("" '
        f"leaves one unanswered; each at most {ANSWER_MAX_CHARS} characters). Omit with "
        "skip true."
    ),
]
Skip = Annotated[
    bool,
    Field(description="Start without answering (the user chose to skip). Default false."),
]


class ClarifyTools:
    def __init__(self, *, call: Call, on_started: Callable[[int], None] | None) -> None:
        self.call = call
        self.on_started = on_started

    def register(self, server: MCPServer) -> None:
        server.add_tool(
            self.answer_questions,
            name="answer_questions",
            annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
        )

    async def answer_questions(
        self, research_id: RootId, ctx: Context, answers: Answers = None, skip: Skip = False
    ) -> CallToolResult:
        """Answer the questions a research started with clarify asks before it starts (its
        `clarification.questions`, while its state is "clarifying"), or skip them. Ask the
        user; never answer for them. The research then starts, with the answers in its lead's
        task: follow it with follow_research. Returns the research as get_research does."""

        def answer(owner: AbstractBaseUser) -> dict:
            run = selectors.run_get(owner=owner, run_id=research_id)
            services.clarify_answer(run=run, answers=answers, skip=skip)
            if self.on_started is not None:
                self.on_started(run.pk)
            return research_of(owner, research_id=research_id)

        return await self.call(ctx, answer)
