from django.contrib import admin
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from research import api, api_clarify, api_datasets
from research.ops import health, metrics

api_urls = [
    path("research", api.runs, name="runs"),
    path("research/<int:run_id>", api.run_detail, name="run-detail"),
    path("research/<int:run_id>/cancel", api.run_cancel, name="run-cancel"),
    path("research/<int:run_id>/resume", api.run_resume, name="run-resume"),
    path("research/<int:run_id>/tree", api.run_tree, name="run-tree"),
    path("research/<int:run_id>/states", api.run_states, name="run-states"),
    path("research/<int:run_id>/messages", api.run_messages, name="run-messages"),
    path("research/<int:run_id>/events", api.run_events, name="run-events"),
    path("research/<int:run_id>/report", api.run_report, name="run-report"),
    path("research/<int:run_id>/plan", api.run_plan, name="run-plan"),
    path("research/<int:run_id>/plan/approve", api.run_plan_approve, name="run-plan-approve"),
    path("research/<int:run_id>/notes", api.run_notes, name="run-notes"),
    path("research/<int:run_id>/clarify", api_clarify.run_clarify, name="run-clarify"),
    path("datasets", api_datasets.datasets, name="datasets"),
    path("datasets/<int:dataset_id>", api_datasets.dataset_detail, name="dataset-detail"),
    path(
        "datasets/<int:dataset_id>/documents",
        api_datasets.dataset_documents,
        name="dataset-documents",
    ),
    path(
        "datasets/<int:dataset_id>/documents/<int:document_id>",
        api_datasets.dataset_document,
        name="dataset-document",
    ),
    path("datasets/<int:dataset_id>/query", api_datasets.dataset_query, name="dataset-query"),
]


def favicon(request):
    """The icon browsers ask for on pages that name none (the admin, the API's docs)."""
    # Not permanent: the icon's hashed name changes with each collectstatic.
    return redirect(static("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("v1/gb/", include((api_urls, "api"))),
    path("v1/schema", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves the explorer's script as a file: no inline script (CSP).
    path("v1/docs", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    path("", include("frontend.urls")),
]

handler404 = "research.api.not_found"
handler500 = "research.api.server_error"
