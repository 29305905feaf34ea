from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    verbose_name = "Web UI"

    def ready(self) -> None:
        from django.contrib import admin

        from frontend.throttled import throttle_admin_login

        throttle_admin_login(admin.site)

        from frontend import delivery
        from research.events import delivery as published

        # Every process that loads the apps pushes what its agents and services publish.
        published.install(delivery)
