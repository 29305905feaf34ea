"""The team tools of seed 000: spawn, wait for and cancel sub-agents (`spawn`, `children`);
list siblings and message them (`messages`). Who may message whom is decided here; the
messenger only carries what it is given. The limits and the record of a spawn are in
research.services.subagent_spawn, the tree's lifecycle (ending sub-agents, refusing an early
answer) in agents.runtime.tree.
"""

from django.conf import settings

from agents import kinds
from agents.runtime.context import AgentContext
from agents.tools.base import Tool
from agents.tools.team.children import CANCEL_SUBAGENT, INSPECT_SUBAGENT, WAIT_SUBAGENTS
from agents.tools.team.messages import LIST_SIBLINGS, READ_MESSAGES, SEND_MESSAGE
from agents.tools.team.spawn import spawn_subagent_tool, spawn_subagents_tool
from research.selectors import team as team_reads

# --- which tools an agent gets ----------------------------------------------------------------


def tools_for(ctx: AgentContext) -> list[Tool]:
    tools = []
    if may_spawn(ctx):
        catalog = kinds.catalog()
        tools += [
            spawn_subagent_tool(catalog, plan=ctx.is_root),
            spawn_subagents_tool(catalog, plan=ctx.is_root),
            WAIT_SUBAGENTS,
            INSPECT_SUBAGENT,
            CANCEL_SUBAGENT,
        ]
    if not ctx.is_root:
        tools += [LIST_SIBLINGS, SEND_MESSAGE, READ_MESSAGES]
    return tools


def may_spawn(ctx: AgentContext) -> bool:
    """Sub-agents are on unless the server or the user turned them off; the last generation
    does not get the tool at all (it never sees it, rather than being refused)."""
    if not settings.RESEARCH_SUBAGENTS_ENABLED:
        return False
    if ctx.depth >= settings.RESEARCH_MAX_SUBAGENT_DEPTH:
        return False
    return team_reads.subagents_allowed_for(owner_id=ctx.owner_id)
