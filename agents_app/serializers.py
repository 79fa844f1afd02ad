"""Request and response shapes of the agents, scenarios, sessions and profiles endpoints.

Response serializers document the CONTRACTS bodies in the OpenAPI schema; request serializers
validate input (unknown fields are rejected so a typo never silently does nothing).
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents_app.definitions import turn_taking_schema as tt
from agents_app.session_limits import MAX_PROMPT_CHARS
from agents_app.strict_bodies import StrictSerializer
from voiceagent.conversation.session import SESSION_ID_RE
from voiceagent.speech.voices import voice_problem


def session_id_field(required: bool = True, **kwargs) -> serializers.RegexField:
    return serializers.RegexField(
        SESSION_ID_RE.pattern,
        max_length=128,
        required=required,
        error_messages={"invalid": "1-128 characters of A-Z a-z 0-9 _ . : -"},
        **kwargs,
    )


class TurnTakingSerializer(StrictSerializer):
    """An agent's turn-taking overrides: every key optional, an absent one follows the global
    setting of the same name in capitals (MIN_INTERRUPTION_MS, ...), as does one sent as null.
    Only describes the section in the schema: :class:`TurnTakingField` checks it."""

    min_interruption_ms = serializers.IntegerField(
        min_value=tt.INTEGER_RANGES["min_interruption_ms"][0],
        max_value=tt.INTEGER_RANGES["min_interruption_ms"][1],
        required=False,
        allow_null=True,
        help_text="speech over the agent shorter than this does not stop it",
    )
    endpointing_max_ms = serializers.IntegerField(
        min_value=tt.INTEGER_RANGES["endpointing_max_ms"][0],
        max_value=tt.INTEGER_RANGES["endpointing_max_ms"][1],
        required=False,
        allow_null=True,
        help_text="silence that ends a turn stopping on an unfinished clause or a number",
    )
    filler_after_ms = serializers.IntegerField(
        min_value=tt.INTEGER_RANGES["filler_after_ms"][0],
        max_value=tt.INTEGER_RANGES["filler_after_ms"][1],
        required=False,
        allow_null=True,
        help_text="a tool still running after this long: the agent says a filler (0 = never)",
    )
    fillers = serializers.ListField(
        child=serializers.CharField(max_length=tt.MAX_FILLER_CHARS),
        min_length=1,
        max_length=tt.MAX_FILLERS,
        required=False,
        allow_null=True,
        help_text="the agent's filler lines, said in turn",
    )
    reprompt_after_s = serializers.FloatField(
        min_value=tt.NUMBER_RANGES["reprompt_after_s"][0],
        max_value=tt.NUMBER_RANGES["reprompt_after_s"][1],
        required=False,
        allow_null=True,
        help_text="caller silent this long after the agent spoke: it re-prompts (0 = never)",
    )
    max_reprompts = serializers.IntegerField(
        min_value=tt.INTEGER_RANGES["max_reprompts"][0],
        max_value=tt.INTEGER_RANGES["max_reprompts"][1],
        required=False,
        allow_null=True,
        help_text="re-prompts in a row before the goodbye",
    )
    reprompt = serializers.CharField(max_length=tt.MAX_LINE_CHARS, required=False, allow_null=True)
    goodbye = serializers.CharField(
        max_length=tt.MAX_LINE_CHARS,
        required=False,
        allow_null=True,
        help_text="said after the last re-prompt",
    )
    max_conversation_s = serializers.FloatField(
        min_value=tt.NUMBER_RANGES["max_conversation_s"][0],
        max_value=tt.NUMBER_RANGES["max_conversation_s"][1],
        required=False,
        allow_null=True,
        help_text="the conversation's length bound (0 = unbounded)",
    )
    time_limit_line = serializers.CharField(
        max_length=tt.MAX_LINE_CHARS,
        required=False,
        allow_null=True,
        help_text="said when the bound is reached",
    )


@extend_schema_field(TurnTakingSerializer)
class TurnTakingField(serializers.Field):
    """A ``turn_taking`` section in a request, checked by the file loader's rules (one set of
    messages for files, admin and REST); a fault is a 400 naming the key."""

    default_error_messages = {"null": "Send {{}} to clear the section, not null."}

    def to_internal_value(self, data):
        problems: dict[str, list[str]] = {}

        def problem(field_name: str, message: str) -> None:
            key = field_name.removeprefix(f"{tt.SECTION}.") if field_name != tt.SECTION else ""
            problems.setdefault(key, []).append(message)

        values = tt.check_turn_taking(data, problem)
        if "" in problems:
            raise serializers.ValidationError(problems[""])
        if problems:
            raise serializers.ValidationError(problems)
        return values

    def to_representation(self, value):
        return dict(value or {})


class VoiceField(serializers.CharField):
    """A voice from the allow-list of :mod:`voiceagent.speech.voices` (README, Production)."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        problem = voice_problem(value, settings.CONFIG.TTS_VOICES_DIR)
        if problem:
            raise serializers.ValidationError(problem)
        return value


class RuntimeSettingsSerializer(StrictSerializer):
    min_fields = 1  # a PUT that changes nothing is a mistake: 400 "Nothing to update"
    model = serializers.CharField(max_length=100, required=False, allow_null=True)
    temperature = serializers.FloatField(min_value=0, max_value=2, required=False, allow_null=True)
    top_p = serializers.FloatField(min_value=0, max_value=1, required=False, allow_null=True)
    max_tokens = serializers.IntegerField(min_value=1, max_value=16384, required=False, allow_null=True)
    voice = VoiceField(
        max_length=100,
        required=False,
        allow_null=True,
        help_text="an installed voice, a voice file's name in TTS_VOICES_DIR, an Azure neural or OpenAI "
        "realtime voice name, or a locale; anything else is a 400 (README, Production)",
    )
    voice_style = serializers.CharField(max_length=50, required=False, allow_null=True)
    voice_rate = serializers.RegexField(
        r"^(?:[+-]?\d{1,3}(?:\.\d+)?%|x-slow|slow|medium|fast|x-fast|default)$",
        required=False,
        allow_null=True,
    )
    greeting = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    turn_taking = TurnTakingField(
        required=False, help_text="turn-taking overrides; a PUT replaces the whole section ({} clears it)"
    )


class AgentCreateSerializer(RuntimeSettingsSerializer):
    session_id = session_id_field()
    name = serializers.RegexField(
        r"^[A-Za-z][A-Za-z0-9_-]{0,63}$",
        error_messages={"invalid": "letters, digits, _ and -, starting with a letter"},
    )
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    prompt = serializers.RegexField(  # some text besides whitespace
        r"\S",
        max_length=MAX_PROMPT_CHARS,
        trim_whitespace=False,
        error_messages={"invalid": "must not be empty", "blank": "must not be empty"},
    )
    tools = serializers.ListField(child=serializers.CharField(max_length=128), max_length=64, default=list)
    handoff_trigger = serializers.RegexField(r"^[A-Za-z0-9_-]{1,64}$", required=False, allow_null=True)
    return_greeting = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    vad_silence_timeout_ms = serializers.IntegerField(
        min_value=100, max_value=10000, required=False, allow_null=True
    )


class AgentSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    greeting = serializers.CharField()
    handoff_trigger = serializers.CharField(allow_null=True)
    tools = serializers.ListField(child=serializers.CharField())
    prompt = serializers.CharField(required=False, help_text="template source (detail only)")
    model = serializers.CharField(allow_null=True)
    temperature = serializers.FloatField(allow_null=True)
    top_p = serializers.FloatField(allow_null=True)
    max_tokens = serializers.IntegerField(allow_null=True)
    voice = serializers.CharField(allow_null=True)
    voice_style = serializers.CharField(allow_null=True)
    voice_rate = serializers.CharField(allow_null=True)
    return_greeting = serializers.CharField()
    vad_silence_timeout_ms = serializers.IntegerField(allow_null=True)
    turn_taking = TurnTakingSerializer(help_text="the agent's overrides; absent keys follow the globals")
    source = serializers.ChoiceField(choices=["file", "admin", "session"])
    session_id = serializers.CharField(allow_null=True)


class AgentListSerializer(serializers.Serializer):
    agents = AgentSerializer(many=True)
    total = serializers.IntegerField()


class HandoffSerializer(StrictSerializer):
    # "from" is a Python keyword: declared below through the fields mapping
    to = serializers.CharField(max_length=64)
    tool = serializers.CharField(max_length=64)
    type = serializers.ChoiceField(choices=["announced", "discrete"], default="announced")


HandoffSerializer._declared_fields["from"] = serializers.CharField(max_length=64)


class ScenarioCreateSerializer(StrictSerializer):
    session_id = session_id_field()
    name = serializers.RegexField(
        r"^[A-Za-z][A-Za-z0-9_-]{0,63}$",
        error_messages={"invalid": "letters, digits, _ and -, starting with a letter"},
    )
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    start_agent = serializers.CharField(max_length=64)
    agents = serializers.ListField(child=serializers.CharField(max_length=64), min_length=1, max_length=32)
    handoffs = HandoffSerializer(many=True, required=False, default=list)
    agent_defaults = serializers.DictField(required=False, default=dict)
    transfer_target = serializers.RegexField(
        r"^(\+[1-9][0-9]{6,14}|8:acs:[A-Za-z0-9_.:-]{1,200})$",
        required=False,
        allow_null=True,
        help_text="where escalate_to_human transfers a phone call: +E.164 number or ACS user (8:acs:...)",
    )
    recording = serializers.BooleanField(required=False, allow_null=True, default=None)
    recording_announcement = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default=""
    )


class ScenarioSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    start_agent = serializers.CharField()
    agents = serializers.ListField(child=serializers.CharField())
    handoffs = serializers.ListField(child=serializers.DictField())
    agent_defaults = serializers.DictField()
    transfer_target = serializers.CharField(
        allow_null=True, help_text="escalate_to_human's phone transfer target"
    )
    recording = serializers.BooleanField(allow_null=True)
    recording_announcement = serializers.CharField()
    source = serializers.ChoiceField(choices=["file", "admin", "session"])
    session_id = serializers.CharField(allow_null=True)


class ScenarioListSerializer(serializers.Serializer):
    scenarios = ScenarioSerializer(many=True)
    total = serializers.IntegerField()


class ToolTimingSerializer(serializers.Serializer):
    name = serializers.CharField()
    ms = serializers.FloatField()


class TurnLatencySerializer(serializers.Serializer):
    """Milliseconds per stage of the turn this assistant turn answers; null where the stage did
    not run (typed text: no stt; live mode: no separate llm/tts stages; the greeting: no
    end_to_first_audio)."""

    stt = serializers.FloatField(allow_null=True, help_text="final transcript - end of speech")
    stt_pause_decode = serializers.FloatField(
        allow_null=True,
        required=False,
        help_text="the decode that gave the final transcript when it was asked for in the caller's "
        "pause, before the turn ended (stt is then ~0); null when it was decoded after the turn ended",
    )
    llm_first_token = serializers.FloatField(allow_null=True, help_text="first model chunk - request")
    tts_first_audio = serializers.FloatField(
        allow_null=True, help_text="first synthesised audio - first clause sent to synthesis"
    )
    end_to_first_audio = serializers.FloatField(
        allow_null=True, help_text="first agent audio to the transport - end of the caller's turn"
    )
    tools = ToolTimingSerializer(many=True, help_text="each tool call's duration")
    handoff = serializers.FloatField(allow_null=True, help_text="handoff call -> new agent ready")
    barge_in = serializers.FloatField(
        allow_null=True, help_text="caller speech detected -> agent audio stopped (interrupted turns)"
    )


class TurnUsageSerializer(serializers.Serializer):
    """What the turn used; null where not reported (the offline rules engine reports no tokens)
    or not applicable (realtime audio in cascade mode)."""

    llm_tokens_in = serializers.IntegerField(allow_null=True)
    llm_tokens_out = serializers.IntegerField(allow_null=True)
    stt_audio_s = serializers.FloatField(allow_null=True, help_text="caller audio recognised")
    tts_chars = serializers.IntegerField(allow_null=True, help_text="characters synthesised")
    realtime_audio_in_s = serializers.FloatField(allow_null=True)
    realtime_audio_out_s = serializers.FloatField(allow_null=True)


class HistoryTurnSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["user", "assistant", "tool", "system"])
    content = serializers.CharField()
    agent = serializers.CharField(allow_null=True)
    at = serializers.CharField()
    tool_name = serializers.CharField(required=False)
    tool_call_id = serializers.CharField(required=False, help_text="tool turns: the model's id of the call")
    arguments = serializers.JSONField(required=False, help_text="tool turns: the arguments of the call")
    latency_ms = TurnLatencySerializer(required=False, help_text="assistant turns")
    usage = TurnUsageSerializer(required=False, help_text="assistant turns")
    heard = serializers.ChoiceField(
        choices=["unknown", "played", "cut"],
        required=False,
        help_text="assistant turns: how much the caller heard. A reply is recorded whole when sent "
        "(unknown) and corrected once it has played out (played) or was cut by a barge-in (cut: "
        "the content is then the words heard); unknown stays when the serving process died first.",
    )
    speaker = serializers.ChoiceField(
        choices=["person"],
        required=False,
        help_text="who said it when not the agent or the caller: person (a human who took the "
        "conversation over: its agent field names them; system turns mark the takeover and the handback; "
        "or the contact centre's person heard by the AudioHook monitor, agent 'contact-center agent')",
    )


class SessionHandoffSerializer(serializers.Serializer):
    to = serializers.CharField()
    type = serializers.CharField()
    at = serializers.CharField()


SessionHandoffSerializer._declared_fields["from"] = serializers.CharField()


class SessionSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    scenario = serializers.CharField()
    active_agent = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    last_activity_at = serializers.CharField()
    transport = serializers.ChoiceField(choices=["browser", "phone", "contactcenter"], allow_null=True)
    memory = serializers.DictField()
    history = HistoryTurnSerializer(many=True)
    handoffs = SessionHandoffSerializer(many=True)


class SessionResetSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    previous_session_id = serializers.CharField()
    scenario = serializers.CharField()
    active_agent = serializers.CharField()


class ProfileRequestSerializer(StrictSerializer):
    scenario = serializers.ChoiceField(choices=["banking", "insurance"], required=False, default="banking")
    seed = serializers.IntegerField(min_value=0, max_value=2**53, required=False, allow_null=True)
    session_id = session_id_field(required=False, allow_null=True)


class AccountSerializer(serializers.Serializer):
    type = serializers.CharField()
    number_last4 = serializers.CharField()
    balance = serializers.FloatField()
    currency = serializers.CharField()


class MfaSerializer(serializers.Serializer):
    method = serializers.ChoiceField(choices=["sms", "email"])
    enabled = serializers.BooleanField()
    code_length = serializers.IntegerField()


class VerificationSerializer(serializers.Serializer):
    ssn_last4 = serializers.CharField()
    date_of_birth = serializers.CharField()


class ProfileSerializer(serializers.Serializer):
    id = serializers.CharField()
    full_name = serializers.CharField()
    email = serializers.CharField()
    phone_number = serializers.CharField()
    institution_name = serializers.CharField()
    client_id = serializers.CharField()
    accounts = AccountSerializer(many=True)
    mfa = MfaSerializer()
    verification = VerificationSerializer()
    created_at = serializers.CharField()
    expires_at = serializers.CharField()
