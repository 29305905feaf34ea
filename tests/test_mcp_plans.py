"""An assistant reads and approves a research's plan over MCP (research/mcp_server/plans.py),
with the SDK's own client over streamable HTTP against a real daphne and its agent pool."""

from importlib.metadata import version
from typing import Any

import pytest
from mcp import Client
from rest_framework.authtoken.models import Token

from agents.llm.scripted import call, reply
from research import services
from research.models import Plan, Run
from tests.conftest import wait_finished
from tests.test_mcp_server import error_text, http_session, in_process, result

TOPIC = "MCP plan topic: where kingfishers nest"
REPORT = "Kingfishers nest in burrows in river banks."


def test_an_assistant_reads_a_paused_plan_approves_it_edited_and_the_research_resumes(
    daphne_server, scripted_llm, alice, bob, api
):
    scripted_llm.script(TOPIC, call("write_plan", items=["Nests", "Food"]), reply(REPORT))
    url = f"{daphne_server.url}/mcp"

    async def as_alice(client: Client) -> dict[str, Any]:
        seen: dict[str, Any] = {"server": client.server_info}
        started = result(
            await client.call_tool("start_research", {"topic": TOPIC, "review_plan": True})
        )
        seen["started"] = started
        seen["paused"] = result(
            await client.call_tool(
                "follow_research", {"research_id": started["id"], "timeout_seconds": 60}
            )
        )
        seen["plan"] = result(await client.call_tool("get_plan", {"research_id": started["id"]}))
        seen["approved"] = result(
            await client.call_tool(
                "approve_plan",
                {"research_id": started["id"], "items": ["Where they nest", "What they eat"]},
            )
        )
        seen["done"] = result(
            await client.call_tool(
                "follow_research", {"research_id": started["id"], "timeout_seconds": 60}
            )
        )
        seen["again"] = error_text(
            await client.call_tool("approve_plan", {"research_id": started["id"]})
        )
        return seen

    seen = http_session(url, Token.objects.create(user=alice).key, as_alice)
    research_id = seen["started"]["id"]

    assert seen["server"].version == version("canopy") != ""
    assert seen["paused"]["awaiting_review"] is True
    plan = seen["plan"]
    assert (plan["awaiting_review"], plan["approved"], plan["version"]) == (True, False, 1)
    assert [(item["text"], item["status"]) for item in plan["items"]] == [
        ("Nests", "open"),
        ("Food", "open"),
    ]
    approved = seen["approved"]
    assert (approved["awaiting_review"], approved["approved"], approved["version"]) == (
        False,
        True,
        2,
    )
    assert [version["author"] for version in approved["history"]] == ["agent", "analyst"]
    assert seen["done"]["status"] == "done"
    assert wait_finished(Run.objects.get(pk=research_id)).report.startswith(REPORT)
    rest = api.post(f"/v1/gb/research/{research_id}/plan/approve", {}, format="json")
    assert rest.status_code == 409
    assert seen["again"] == rest.json()["detail"]
    assert (
        seen["again"]
        == f"research {research_id} is not waiting for a plan review: it has ended (done)."
    )

    async def as_bob(client: Client) -> list[str]:
        return [
            error_text(await client.call_tool(name, {"research_id": research_id}))
            for name in ("get_plan", "approve_plan")
        ]

    not_found = f"no research with id {research_id}."
    assert http_session(url, Token.objects.create(user=bob).key, as_bob) == [not_found] * 2
    assert Plan.objects.filter(root_id=research_id).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_sub_agents_plan_and_bad_items_are_refused_as_the_rest_api_refuses_them(
    alice, api, tree_factory
):
    root = tree_factory(children=("history",), grandchildren=(), review_plan=True)
    child = root.children.get()
    services.run_claim(run_id=root.pk)
    services.plan_write(root_id=root.pk, items=["Nests"])
    assert services.plan_pause(root_id=root.pk)

    async def work(client: Client) -> dict[str, Any]:
        names = {tool.name for tool in (await client.list_tools()).tools}
        return {
            "names": names,
            "child": error_text(await client.call_tool("get_plan", {"research_id": child.pk})),
            "empty": error_text(
                await client.call_tool("approve_plan", {"research_id": root.pk, "items": []})
            ),
            "type": error_text(
                await client.call_tool("approve_plan", {"research_id": root.pk, "items": "x"})
            ),
        }

    answers = in_process(alice, work)

    assert {"get_plan", "approve_plan"} <= answers["names"]
    assert answers["child"] == api.get(f"/v1/gb/research/{child.pk}/plan").json()["detail"]
    rest = api.post(f"/v1/gb/research/{root.pk}/plan/approve", {"items": []}, format="json")
    assert rest.status_code == 400
    assert answers["empty"] == rest.json()["items"][0]
    assert answers["empty"].startswith("a plan has 1 to ")
    assert answers["type"].startswith("items: ")
    assert Run.objects.get(pk=root.pk).status == "paused"
