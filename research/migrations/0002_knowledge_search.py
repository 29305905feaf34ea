"""Full-text search over chunks (see research.fulltext).

PostgreSQL: a GIN index on to_tsvector('english', text), the expression the search uses.
SQLite: an FTS5 table with external content (research_chunk) kept in step by triggers.

Nothing here changes Django's model state. Note for later migrations: on SQLite, Django
rebuilds a table it alters (create, copy, drop, rename), and dropping research_chunk drops
these triggers: a migration that alters research_chunk must run SQLITE_TRIGGERS again.
"""

from django.db import migrations

POSTGRESQL_INDEX = (
    "CREATE INDEX IF NOT EXISTS research_chunk_text_fts "
    "ON research_chunk USING gin (to_tsvector('english'::regconfig, text))"
)
POSTGRESQL_DROP = "DROP INDEX IF EXISTS research_chunk_text_fts"

SQLITE_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5("
    "text, content='research_chunk', content_rowid='id', tokenize='porter unicode61')"
)
SQLITE_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS chunk_fts_insert AFTER INSERT ON research_chunk BEGIN
        INSERT INTO chunk_fts(rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS chunk_fts_delete AFTER DELETE ON research_chunk BEGIN
        INSERT INTO chunk_fts(chunk_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS chunk_fts_update AFTER UPDATE ON research_chunk BEGIN
        INSERT INTO chunk_fts(chunk_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO chunk_fts(rowid, text) VALUES (new.id, new.text);
    END""",
]
# Index the chunks that existed before this migration.
SQLITE_REBUILD = "INSERT INTO chunk_fts(chunk_fts) VALUES ('rebuild')"
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS chunk_fts_insert",
    "DROP TRIGGER IF EXISTS chunk_fts_delete",
    "DROP TRIGGER IF EXISTS chunk_fts_update",
    "DROP TABLE IF EXISTS chunk_fts",
]


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_INDEX)
    elif vendor == "sqlite":
        for statement in [SQLITE_TABLE, *SQLITE_TRIGGERS, SQLITE_REBUILD]:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRESQL_DROP)
    elif vendor == "sqlite":
        for statement in SQLITE_DROP:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("research", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
