"""The API's docs (/v1/docs, from /v1/schema): generated without a warning, every operation
under the resource it acts on and with an id of its own (research/schema.py)."""

import io
from collections import Counter

import pytest
import yaml
from django.core.management import call_command

pytestmark = pytest.mark.django_db

METHODS = {"get", "post", "put", "patch", "delete"}
RESOURCES = {"research", "plans", "notes", "events", "exports", "datasets"}


def operations(schema: dict) -> list[tuple[str, str, dict]]:
    return [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def test_generating_the_schema_warns_of_nothing(tmp_path, capsys):
    target = tmp_path / "schema.yaml"
    out, err = io.StringIO(), io.StringIO()

    # --fail-on-warn: a warning or an error (an operationId collision among them) fails it.
    call_command("spectacular", "--file", str(target), "--fail-on-warn", stdout=out, stderr=err)

    printed = out.getvalue() + err.getvalue() + "".join(capsys.readouterr())
    assert "Warning" not in printed and "Error" not in printed, printed
    assert yaml.safe_load(target.read_text())["paths"]


def test_every_operation_has_one_resource_tag_and_its_own_readable_id(api):
    response = api.get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    listed = operations(response.json())

    ids = Counter(operation["operationId"] for _, _, operation in listed)
    tags = {(path, method): operation["tags"] for path, method, operation in listed}

    assert [name for name, count in ids.items() if count > 1] == []
    assert all(name.replace("_", "").isalpha() for name in ids), sorted(ids)  # no `_2`
    assert all(len(tag) == 1 for tag in tags.values()), tags
    assert {tag for (tag,) in tags.values()} == RESOURCES
    assert tags[("/v1/gb/research/{run_id}/plan/approve", "post")] == ["plans"]
    assert tags[("/v1/gb/research/{run_id}/notes", "post")] == ["notes"]
    assert tags[("/v1/gb/research/{run_id}/events", "get")] == ["events"]
    assert tags[("/v1/gb/research/{run_id}/export", "get")] == ["exports"]
    assert tags[("/v1/gb/datasets/{dataset_id}/documents", "post")] == ["datasets"]
    assert tags[("/v1/gb/research/{run_id}", "get")] == ["research"]
    assert {"research_list", "research_start", "plan_approve", "research_export"} <= set(ids)


def test_the_docs_page_loads_the_schema(client, alice):
    client.force_login(alice)
    page = client.get("/v1/docs")
    script = client.get("/v1/docs?script=")  # a file, not inline (CSP)
    assert page.status_code == script.status_code == 200
    assert "/v1/schema" in script.content.decode()
