"""The service's URL map plus the MCP routes (until voiceagent/urls.py includes them itself)."""

from django.urls import include, path

from voiceagent import urls as base

urlpatterns = [path("api/v1/", include("mcp_app.urls")), *base.urlpatterns]

handler400 = base.handler400
handler403 = base.handler403
handler404 = base.handler404
handler500 = base.handler500
