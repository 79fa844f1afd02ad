from django.urls import path

from calls import telephony_views, twilio_views, views
from calls.media_views import MediaStatusView

urlpatterns = [
    path("browser/status", views.BrowserStatusView.as_view(), name="browser-status"),
    path("calls/", telephony_views.CallListView.as_view(), name="calls-list"),
    path("calls/initiate", telephony_views.CallInitiateView.as_view(), name="calls-initiate"),
    path("calls/terminate", telephony_views.CallTerminateView.as_view(), name="calls-terminate"),
    path("calls/answer", telephony_views.CallAnswerView.as_view(), name="calls-answer"),
    path("calls/callbacks", telephony_views.CallCallbacksView.as_view(), name="calls-callbacks"),
    path("twilio/voice", twilio_views.TwilioVoiceView.as_view(), name="twilio-voice"),
    path("twilio/status", twilio_views.TwilioStatusView.as_view(), name="twilio-status"),
    path("twilio/dial", twilio_views.TwilioDialView.as_view(), name="twilio-dial"),
    path("media/status", MediaStatusView.as_view(), name="media-status"),
]
