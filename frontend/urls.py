from django.contrib.auth import views as auth_views
from django.urls import path

from frontend import views

urlpatterns = [
    path("", views.runs, name="runs"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("runs/<int:run_id>/", views.run, name="run"),
    path(
        "runs/<int:root_id>/agents/<int:run_id>/",
        views.agent_panel,
        name="agent-panel",
    ),
]
