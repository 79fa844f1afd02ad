"""URL map: everything HTTP under /api/v1, admin at /admin/, Prometheus at /metrics, the web page at /."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from voiceagent.health import views as health
from voiceagent.observability.metrics_view import MetricsView
from voiceagent.pages import PageView, favicon

api_v1 = [
    path("health", health.HealthView.as_view(), name="health"),
    path("ready", health.ReadyView.as_view(), name="ready"),
    path("readiness", health.ReadinessView.as_view(), name="readiness"),
    path("pools", health.PoolsView.as_view(), name="pools"),
    path("appconfig", health.AppConfigView.as_view(), name="appconfig"),
    path("appconfig/refresh", health.AppConfigRefreshView.as_view(), name="appconfig-refresh"),
    path("", include("agents_app.urls")),
    path("", include("calls.urls")),
    path("", include("bridge.urls")),
    path("", include("mcp_app.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("metrics", MetricsView.as_view(), name="metrics"),  # Prometheus: where scrapers look
    path("admin/", admin.site.urls),
    path("", PageView.as_view(template_name="index.html"), name="index"),
    path("dashboard", PageView.as_view(template_name="dashboard.html"), name="dashboard"),
    path("favicon.ico", favicon, name="favicon"),
]

handler400 = "voiceagent.errors.json_400"
handler403 = "voiceagent.errors.json_403"
handler404 = "voiceagent.errors.json_404"
handler500 = "voiceagent.errors.json_500"
