"""Tree token totals kept on every run (its own plus its subtree's), like tree_cost_usd."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    Run = apps.get_model("research", "Run")
    totals: dict[int, list[int]] = {}
    rows = Run.objects.order_by("-depth").values_list("pk", "parent_id", "input_tokens", "output_tokens")
    for pk, parent_id, input_tokens, output_tokens in rows.iterator():
        own = totals.setdefault(pk, [0, 0])
        own[0] += input_tokens
        own[1] += output_tokens
        if parent_id is not None:
            parent = totals.setdefault(parent_id, [0, 0])
            parent[0] += own[0]
            parent[1] += own[1]
    for pk, (input_tokens, output_tokens) in totals.items():
        Run.objects.filter(pk=pk).update(
            tree_input_tokens=input_tokens, tree_output_tokens=output_tokens
        )


class Migration(migrations.Migration):
    dependencies = [("research", "0002_knowledge_search")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="tree_input_tokens",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="run",
            name="tree_output_tokens",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
