from django.urls import path

from agents_app import views

urlpatterns = [
    path("agents", views.AgentListView.as_view(), name="agents"),
    path("agents/<str:name>", views.AgentDetailView.as_view(), name="agent-detail"),
    path("scenarios", views.ScenarioListView.as_view(), name="scenarios"),
    path("scenarios/<str:name>", views.ScenarioDetailView.as_view(), name="scenario-detail"),
    path("sessions/<str:session_id>", views.SessionDetailView.as_view(), name="session-detail"),
    path("sessions/<str:session_id>/reset", views.SessionResetView.as_view(), name="session-reset"),
    path("profiles/generate", views.ProfileGenerateView.as_view(), name="profile-generate"),
    path("profiles/<str:profile_id>", views.ProfileDetailView.as_view(), name="profile-detail"),
]
