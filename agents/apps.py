from django.apps import AppConfig
from django.conf import settings


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agent runtime"

    def ready(self) -> None:
        # Kinds and tiers are read and checked at startup: a malformed kind file or a tier
        # without a price stops every command with an error naming the file and the field.
        from agents import kinds

        kinds.catalog()
        if settings.SEARCH_PROVIDER:  # the search tools' module is imported only then
            from agents.tools.web import check_provider

            check_provider()
