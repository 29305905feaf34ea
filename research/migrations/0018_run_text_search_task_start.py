"""The runs' search reads the first 4,000 characters of a run's task, not all of it
(research.selectors.runs.text_vector, SEARCHED_TASK_CHARS): PostgreSQL computes the index's
expression at every insert and every change of a topic or a report, and a verifier's task
(the draft and what its sources say, up to about 31 KB) cost 4 to 5 ms more of the step
writer's batch, which every agent of the process waits on. An analyst's topic is at most
2,000 characters by default. Its GIN index is built again on that expression, written here as the
selector writes it, CONCURRENTLY, as 0017 built it. PostgreSQL only.
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import migrations
from django.db.models import Func, TextField, Value
from django.db.models.functions import Coalesce, Concat, Substr

INDEX = "run_text_search"
TASK_CHARS = 4000


def text_vector(task_chars: int | None) -> SearchVector:
    topic = Coalesce("topic", Value(""), output_field=TextField())
    joined = Concat(
        topic if task_chars is None else Substr(topic, 1, task_chars),
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


def rebuild(task_chars: int | None):
    def build(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        Run = apps.get_model("research", "Run")
        index = GinIndex(text_vector(task_chars), name=INDEX)
        schema_editor.add_index(Run, index, concurrently=True)

    return build


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction
    dependencies = [("research", "0017_run_text_search_dotted")]

    operations = [
        migrations.RunPython(rebuild(TASK_CHARS), rebuild(None), elidable=False),
    ]
