"""Clarify before starting (issue 27): a root's `clarify` option, what its lead asked and was
answered (`clarification`), and the `clarifying` state of a root waiting for the answers."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("research", "0012_checkpoints")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="clarify",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="run",
            name="clarification",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="state",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("planning", "Planning"),
                    ("clarifying", "Clarifying"),
                    ("reviewing", "Reviewing"),
                    ("thinking", "Thinking"),
                    ("searching", "Searching"),
                    ("reading", "Reading"),
                    ("querying", "Querying"),
                    ("remembering", "Remembering"),
                    ("spawning", "Spawning"),
                    ("waiting", "Waiting"),
                    ("messaging", "Messaging"),
                    ("writing", "Writing"),
                    ("ended", "Ended"),
                ],
                default="queued",
                max_length=12,
            ),
        ),
        migrations.AlterField(
            model_name="runstate",
            name="state",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("planning", "Planning"),
                    ("clarifying", "Clarifying"),
                    ("reviewing", "Reviewing"),
                    ("thinking", "Thinking"),
                    ("searching", "Searching"),
                    ("reading", "Reading"),
                    ("querying", "Querying"),
                    ("remembering", "Remembering"),
                    ("spawning", "Spawning"),
                    ("waiting", "Waiting"),
                    ("messaging", "Messaging"),
                    ("writing", "Writing"),
                    ("ended", "Ended"),
                ],
                max_length=12,
            ),
        ),
    ]
