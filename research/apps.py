from django.apps import AppConfig


class ResearchConfig(AppConfig):
    name = "research"
    verbose_name = "Research"

    def ready(self) -> None:
        from research.ops import wakeups

        # Every process that queues a research tells the agent processes (after commit).
        wakeups.install()
