from django.urls import path

from bridge import views

urlpatterns = [
    path("contactcenter/health", views.ContactCenterHealthView.as_view(), name="contactcenter-health"),
]
