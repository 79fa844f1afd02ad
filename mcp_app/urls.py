"""MCP management routes; included under ``/api/v1`` (``path("", include("mcp_app.urls"))``)."""

from django.urls import path

from mcp_app import views

urlpatterns = [
    path("mcp/servers", views.ServerListView.as_view(), name="mcp-servers"),
    path("mcp/servers/test", views.ServerTestView.as_view(), name="mcp-servers-test"),
    path("mcp/servers/<str:name>", views.ServerDetailView.as_view(), name="mcp-server-detail"),
    path("mcp/tools", views.ToolListView.as_view(), name="mcp-tools"),
    path("mcp/oauth/start", views.OAuthStartView.as_view(), name="mcp-oauth-start"),
    path("mcp/oauth/callback", views.OAuthCallbackView.as_view(), name="mcp-oauth-callback"),
    path("mcp/oauth/status/<str:name>", views.OAuthStatusView.as_view(), name="mcp-oauth-status"),
]
