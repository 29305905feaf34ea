"""A GIN index for the runs list's search (research.selectors.runs.text_matching).

Without it, a word found in few researches read every one of an owner's runs: 28 s at
100,000 runs. The expression is the one Django's SearchVector("topic", "report",
config="english") writes, to the character, or the planner would not use it. Built
CONCURRENTLY, so a deployment with many runs keeps writing meanwhile. PostgreSQL only:
SQLite's search reads each word with LIKE and has no index to build.
"""

from django.db import migrations

INDEX = "run_text_search"
CREATE = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON gb_agent_research_runs USING gin "
    "(to_tsvector('english'::regconfig, COALESCE(topic, '') || ' ' || COALESCE(report, '')))"
)
DROP = f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction
    dependencies = [("research", "0010_run_worked_time")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
