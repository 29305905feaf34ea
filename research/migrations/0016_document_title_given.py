"""Document.title_given: a title a person gave is shown as given, not replaced by the text's
heading. Documents stored before it are marked given where their title is not one a loader
made of the file's name (its stem or its path, the starter topics, an agent's fact)."""

from pathlib import PurePath

from django.db import migrations, models


def _given(title: str, source: str) -> bool:
    if source.startswith("pydoc_data.topics["):  # the starter dataset's topics
        return False
    path = PurePath(source)
    made = {"untitled"} | ({path.stem, path.with_suffix("").as_posix()} if path.name else set())
    return title not in made


def mark_given_titles(apps, schema_editor):
    Document = apps.get_model("research", "Document")
    uploaded = Document.objects.filter(remembered_by__isnull=True).only("pk", "title", "source")
    given = [doc.pk for doc in uploaded.iterator() if _given(doc.title, doc.source)]
    for start in range(0, len(given), 1000):
        Document.objects.filter(pk__in=given[start : start + 1000]).update(title_given=True)


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0015_run_starred"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="title_given",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_given_titles, migrations.RunPython.noop),
    ]
