from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import exports, followups, knowledge, library, passages, progress, throttled, views

urlpatterns = [
    # Beside the REST API it belongs to: the export is drawn by frontend's renderers.
    path("v1/gb/research/<int:run_id>/export", exports.run_export, name="research-export"),
    path("", views.runs, name="runs"),
    path("login/", throttled.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("runs/<int:run_id>/", views.run, name="run"),
    path("runs/progress", progress.runs_progress, name="runs-progress"),
    path("runs/<int:run_id>/star", library.run_star, name="run-star"),
    path("runs/<int:run_id>/delete", library.run_delete, name="run-delete"),
    path("runs/<int:run_id>/again", library.run_again, name="run-again"),
    path("runs/<int:run_id>/follow-up", followups.run_followup, name="run-followup"),
    path(
        "runs/<int:root_id>/agents/<int:run_id>/",
        views.agent_panel,
        name="agent-panel",
    ),
    path("runs/<int:run_id>/report/", views.run_report, name="run-report"),
    path("kb/", knowledge.knowledge_bases, name="knowledge-bases"),
    path("kb/<int:dataset_id>/", knowledge.knowledge_base, name="knowledge-base"),
    path(
        "kb/<int:dataset_id>/documents/",
        knowledge.knowledge_documents,
        name="knowledge-documents",
    ),
    path("kb/<int:dataset_id>/check", knowledge.upload_check, name="knowledge-upload-check"),
    path("kb/<int:dataset_id>/delete", knowledge.knowledge_base_delete, name="knowledge-delete"),
    path(
        "kb/<int:dataset_id>/documents/<int:document_id>/delete",
        knowledge.document_delete,
        name="knowledge-document-delete",
    ),
    path(
        "kb/<int:dataset_id>/documents/<int:document_id>/passages/<int:position>/",
        passages.passage,
        name="passage",
    ),
]
