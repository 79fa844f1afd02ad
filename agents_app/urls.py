from django.urls import path

from agents_app import session_control_views as control
from agents_app import views
from agents_app.recording_views import SessionRecordingView
from agents_app.scenario_graph_view import ScenarioGraphView

urlpatterns = [
    path("agents", views.AgentListView.as_view(), name="agents"),
    path("agents/<str:name>", views.AgentDetailView.as_view(), name="agent-detail"),
    path("scenarios", views.ScenarioListView.as_view(), name="scenarios"),
    path("scenarios/<str:name>", views.ScenarioDetailView.as_view(), name="scenario-detail"),
    path("scenarios/<str:name>/graph.svg", ScenarioGraphView.as_view(), name="scenario-graph"),
    path("sessions/<str:session_id>", views.SessionDetailView.as_view(), name="session-detail"),
    path("sessions/<str:session_id>/reset", views.SessionResetView.as_view(), name="session-reset"),
    path(
        "sessions/<str:session_id>/takeover", control.SessionTakeoverView.as_view(), name="session-takeover"
    ),
    path("sessions/<str:session_id>/say", control.SessionSayView.as_view(), name="session-say"),
    path(
        "sessions/<str:session_id>/handback", control.SessionHandbackView.as_view(), name="session-handback"
    ),
    path("profiles/generate", views.ProfileGenerateView.as_view(), name="profile-generate"),
    path("profiles/<str:profile_id>", views.ProfileDetailView.as_view(), name="profile-detail"),
    path("sessions/<str:session_id>/recording", SessionRecordingView.as_view(), name="session-recording"),
]
