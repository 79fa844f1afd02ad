"""MCP management routes; included under ``/api/v1`` (``path("", include("mcp_app.urls"))``)."""

from django.urls import path

from mcp_app import oauth_views, server_views

urlpatterns = [
    path("mcp/servers", server_views.ServerListView.as_view(), name="mcp-servers"),
    path("mcp/servers/test", server_views.ServerTestView.as_view(), name="mcp-servers-test"),
    path("mcp/servers/<str:name>", server_views.ServerDetailView.as_view(), name="mcp-server-detail"),
    path("mcp/tools", server_views.ToolListView.as_view(), name="mcp-tools"),
    path("mcp/oauth/start", oauth_views.OAuthStartView.as_view(), name="mcp-oauth-start"),
    path("mcp/oauth/callback", oauth_views.OAuthCallbackView.as_view(), name="mcp-oauth-callback"),
    path("mcp/oauth/status/<str:name>", oauth_views.OAuthStatusView.as_view(), name="mcp-oauth-status"),
]
