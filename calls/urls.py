from django.urls import path

from calls import views

urlpatterns = [
    path("browser/status", views.BrowserStatusView.as_view(), name="browser-status"),
]
