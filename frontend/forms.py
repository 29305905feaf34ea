"""The start form and the runs list's search. The ranges and limits are the service's: the
form calls its checks, so the page, the API and the CLI refuse the same input with the same
words (made sentences here, `sentence`)."""

from django import forms
from django.conf import settings

from frontend.rendering import sentence
from research import pricing
from research.errors import InvalidInput
from research.fulltext import STARTER_DATASET
from research.models import Dataset
from research.pricing import DEMO_MODEL
from research.services.runs import validate_max_steps, validate_topic

# The starter dataset, offered before the owner has it: run_start loads it (a second or two,
# once) when the demo model has no dataset, and the page loads it for any other model.
STARTER = "starter"


def llm_endpoint_configured() -> bool:
    return pricing.endpoint_configured()


def model_can_run(model: str) -> bool:
    return model == DEMO_MODEL or llm_endpoint_configured()


def model_choices() -> list[tuple[str, str]]:
    return [
        (name, f"{name} (offline demo model)" if name == DEMO_MODEL else name)
        for name in pricing.known_models()
        if model_can_run(name)
    ]


NOT_RUNNABLE_HELP = (
    "Only the offline demo model can run here: the server has no LLM endpoint "
    "(OPENAI_API_KEY or OPENAI_BASE_URL) for the others."
)
DEMO_NEEDS_A_DATASET = (
    "The offline demo model answers from a knowledge base, not the web: choose a knowledge "
    "base, or a model that can search the web."
)


def step_budget_help(limit: int) -> str:
    # The form's budget is the root agent's own: each sub-agent is given its own at its
    # spawn, so the page must not call it a budget "per agent".
    return f"The root agent's model rounds, from 1 to {limit}; each sub-agent gets its own."


def _checked(check, value, field: str):
    try:
        return check(value)
    except InvalidInput as error:
        raise forms.ValidationError(sentence(error.message, field)) from None


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
    )
    # `dataset` is the API's name; the analyst reads "knowledge base" on every page.
    dataset = forms.ChoiceField(
        label="Knowledge base",
        required=False,
        help_text="Documents the agents may query and add to.",
    )
    clarify = forms.BooleanField(
        label="Clarify before starting",
        required=False,
        initial=True,
        help_text="The lead may first ask you up to three short questions; you answer or skip.",
    )
    review_plan = forms.BooleanField(
        label="Review the plan first",
        required=False,
        help_text="The research pauses after the lead writes its plan, until you approve it.",
    )

    def __init__(self, *args, owner, **kwargs):
        super().__init__(*args, **kwargs)
        model = self.fields["model"]
        model.choices = model_choices()
        runnable = model_can_run(settings.RESEARCH_MODEL)
        model.initial = settings.RESEARCH_MODEL if runnable else DEMO_MODEL
        if not llm_endpoint_configured():
            model.help_text = NOT_RUNNABLE_HELP
        limit = settings.RESEARCH_MAX_STEPS_LIMIT
        steps = self.fields["max_steps"]
        steps.initial = settings.RESEARCH_DEFAULT_MAX_STEPS
        steps.widget.attrs.update({"min": 1, "max": limit, "inputmode": "numeric"})
        steps.help_text = step_budget_help(limit)
        self._dataset_choices(owner, demo=model.initial == DEMO_MODEL)

    def _dataset_choices(self, owner, *, demo: bool) -> None:
        datasets = list(Dataset.objects.filter(owner=owner).values_list("pk", "name"))
        # Without a search provider (agents.tools.web) the web is the pages a topic names.
        web = "search the web only" if settings.SEARCH_PROVIDER else "no web search is set up"
        choices = [("", f"None: {web}")]
        choices += [(str(pk), name) for pk, name in datasets]
        starter = next((str(pk) for pk, name in datasets if name == STARTER_DATASET), None)
        if starter is None:
            choices.append((STARTER, f"{STARTER_DATASET} (loaded when the research starts)"))
        field = self.fields["dataset"]
        field.choices = choices
        # The demo model can only quote a knowledge base: offer the starter one first.
        if demo:
            field.initial = starter or STARTER

    # The service's own checks, so every wrong field says so at once, in the service's words.
    def clean_topic(self) -> str:
        return _checked(validate_topic, self.cleaned_data["topic"], "topic")

    def clean_max_steps(self) -> int:
        return _checked(validate_max_steps, self.cleaned_data["max_steps"], "max_steps")

    def clean(self) -> dict:
        data = super().clean()
        if data.get("model") == DEMO_MODEL and data.get("dataset") == "":
            self.add_error("dataset", DEMO_NEEDS_A_DATASET)
        return data


STANDINGS = [
    ("", "Any status"),
    ("working", "Working"),
    ("waiting", "Waiting for you"),
    ("done", "Done"),
    ("cancelled", "Cancelled"),
    ("failed", "Failed"),
]


class DateInput(forms.DateInput):
    input_type = "date"


class SearchInput(forms.TextInput):
    input_type = "search"


class RunSearchForm(forms.Form):
    """The runs list's search (GET): words, how a research stands, the days it started."""

    q = forms.CharField(
        label="Search",
        required=False,
        max_length=200,
        widget=SearchInput(attrs={"placeholder": "Words of a topic or report"}),
    )
    status = forms.ChoiceField(label="Status", required=False, choices=STANDINGS)
    since = forms.DateField(label="From", required=False, widget=DateInput)
    until = forms.DateField(label="To", required=False, widget=DateInput)
    starred = forms.BooleanField(label="Starred only", required=False)

    def clean(self) -> dict:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The last day must not be before the first.")
        return data
