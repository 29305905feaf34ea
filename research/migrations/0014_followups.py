"""Follow-ups (issue 27): a root may follow up a done research (Run.follows, a thread), and
its tree holds the sources carried from that research (Source.carried)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('research', '0013_clarify'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='follows',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='followups', to='research.run'),
        ),
        migrations.AddField(
            model_name='source',
            name='carried',
            field=models.BooleanField(default=False),
        ),
    ]
