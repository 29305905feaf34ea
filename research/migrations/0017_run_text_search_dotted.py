"""The runs list's search reads a dot between letters or digits as a space (research.selectors
.runs.text_vector): PostgreSQL's parser read "functools.wraps" as one token, which "wraps"
did not find. Its GIN index is built again on that expression, written here as the selector
writes it (a test holds the planner to using the index). Built CONCURRENTLY, so a deployment
with many runs keeps writing meanwhile. PostgreSQL only: SQLite's search reads each word with
LIKE, and its tokens already split at dots.
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import migrations
from django.db.models import Func, TextField, Value
from django.db.models.functions import Coalesce, Concat

INDEX = "run_text_search"


def text_vector() -> SearchVector:
    joined = Concat(
        Coalesce("topic", Value(""), output_field=TextField()),
        Value(" "),
        Coalesce("report", Value(""), output_field=TextField()),
        output_field=TextField(),
    )
    undotted = Func(
        joined,
        Value(r"([[:alnum:]])\.(?=[[:alnum:]])"),
        Value("\\1 "),
        Value("g"),
        function="regexp_replace",
        output_field=TextField(),
    )
    return SearchVector(undotted, config="english")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
    Run = apps.get_model("research", "Run")
    schema_editor.add_index(Run, GinIndex(text_vector(), name=INDEX), concurrently=True)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON gb_agent_research_runs USING gin "
        "(to_tsvector('english'::regconfig, COALESCE(topic, '') || ' ' || COALESCE(report, '')))"
    )


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction
    dependencies = [("research", "0016_document_title_given")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
