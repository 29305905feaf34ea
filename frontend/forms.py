"""The start form. It checks shapes only: the ranges and limits are the service's, so the page,
the API and the CLI refuse the same input with the same words."""

from django import forms
from django.conf import settings

from research import pricing
from research.fulltext import STARTER_DATASET
from research.models import Dataset
from research.pricing import DEMO_MODEL


def model_choices() -> list[tuple[str, str]]:
    return [
        (name, f"{name} (offline demo model)" if name == DEMO_MODEL else name)
        for name in pricing.known_models()
    ]


class StartResearchForm(forms.Form):
    topic = forms.CharField(
        label="What should Canopy research?",
        widget=forms.Textarea(
            attrs={
                "rows": 3,
                "placeholder": "How do Python's context managers and exceptions interact?",
            }
        ),
        # The service trims and checks it (empty, too long) with the API's wording.
        required=False,
        strip=False,
    )
    model = forms.ChoiceField(label="Model")
    max_steps = forms.IntegerField(
        label="Step budget",
        required=False,
        help_text="Model rounds per agent, from 1 to the server's limit.",
    )
    dataset = forms.ModelChoiceField(
        label="Dataset",
        queryset=Dataset.objects.none(),
        required=False,
        empty_label="None: search the web only",
        help_text="A knowledge base the agents may query and add to.",
    )
    review_plan = forms.BooleanField(
        label="Review the plan first",
        required=False,
        help_text="The research pauses after the lead writes its plan, until you approve it.",
    )

    def __init__(self, *args, owner, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = model_choices()
        self.fields["model"].initial = settings.RESEARCH_MODEL
        limit = settings.RESEARCH_MAX_STEPS_LIMIT
        steps = self.fields["max_steps"]
        steps.initial = settings.RESEARCH_DEFAULT_MAX_STEPS
        steps.widget.attrs.update({"min": 1, "max": limit, "inputmode": "numeric"})
        steps.help_text = f"Model rounds per agent, from 1 to {limit}."
        datasets = Dataset.objects.filter(owner=owner)
        self.fields["dataset"].queryset = datasets
        # The demo model can only quote a knowledge base: offer the starter one first.
        if settings.RESEARCH_MODEL == DEMO_MODEL:
            self.fields["dataset"].initial = datasets.filter(name=STARTER_DATASET).first()
