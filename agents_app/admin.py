"""Admin for agents, scenarios (in :mod:`agents_app.scenario_admin`), sessions
(history read-only, with a conversation viewer) and demo profiles.

Forms run the same validators as the file loader (:mod:`agents_app.definitions`) and show their
problems on the offending field. Saving an edit of a file agent stores it as an override that
survives restarts (see :mod:`agents_app.models`); every save tells all workers to reload.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db import transaction

from agents_app.admin_forms import (
    TURN_TAKING_FORM_FIELDS,
    ToolPicker,
    compose_turn_taking,
    definition_problems,
    model_fields,
    tool_choices,
    turn_taking_fields,
    turn_taking_initial,
)
from agents_app.catalog import (
    agent_tool_names,
    catalog,
    mcp_server_names,
    template_variables_allowed,
)
from agents_app.conversation_view import conversation_rows, epoch_text
from agents_app.definitions import validate_agent_fields
from agents_app.models import (
    AGENT_FIELDS,
    Agent,
    DemoProfile,
    HandoffRecord,
    HistoryTurn,
    Session,
)
from agents_app.recording_admin import RecordingAdminMixin, player_url
from agents_app.scenario_admin import ScenarioAdmin, run_agent_tests_for

__all__ = ["AgentAdmin", "ScenarioAdmin", "SessionAdmin", "run_agent_tests_for"]  # importing registers them


def _bump_after_commit() -> None:
    transaction.on_commit(catalog.bump)


class AgentFormBase(forms.ModelForm):
    """An agent: tools picked from the registry's list, turn-taking and model settings as typed
    fields with their limits (:mod:`agents_app.admin_forms`); the loader's rules on the whole."""

    tools = forms.MultipleChoiceField(
        required=False,
        widget=ToolPicker,
        help_text="Tick what this agent may call: built-in tools, the handoff triggers of the agents "
        "it may hand the caller to, and MCP tools (a server's name: all of its tools).",
    )

    class Meta:
        model = Agent
        fields = ("name", *(f for f in AGENT_FIELDS if f != "turn_taking"))
        widgets = {
            "prompt": forms.Textarea(attrs={"rows": 20, "cols": 100, "style": "font-family: monospace"}),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        current = list(self.instance.tools or []) if self.instance.pk else []
        if self.is_bound:
            current += self.data.getlist("tools") if hasattr(self.data, "getlist") else []
        self.fields["tools"].choices = tool_choices(current)
        if self.instance.pk:
            self.fields["tools"].initial = list(self.instance.tools or [])
            for name, value in turn_taking_initial(self.instance.turn_taking).items():
                self.fields[name].initial = value

    @property
    def changed_data(self) -> list[str]:
        """The typed turn-taking fields change one stored field, ``turn_taking``."""
        changed = list(super().changed_data)
        if any(name in changed for name in TURN_TAKING_FORM_FIELDS) and "turn_taking" not in changed:
            changed.append("turn_taking")
        return changed

    def clean(self):
        cleaned = super().clean()
        # an empty section (every setting global), never a JSON null; lines trimmed
        cleaned["turn_taking"] = compose_turn_taking(cleaned, self.add_error)
        self.instance.turn_taking = cleaned["turn_taking"]
        name = cleaned.get("name")
        if not name:
            return cleaned
        data = {"name": name, **{f: cleaned.get(f) for f in AGENT_FIELDS}}
        data = {k: v for k, v in data.items() if v not in (None, "")}
        data.setdefault("prompt", "")
        catalog.ensure_current()
        others = [a for a in catalog.agents.values() if a.name.lower() != name.lower()]
        if any(a.name.lower() == name.lower() for a in catalog.agents.values()) and self.instance.pk is None:
            self.add_error("name", "An agent with this name already exists.")
        triggers = {a.handoff_trigger for a in others if a.handoff_trigger}
        if data.get("handoff_trigger") in triggers:
            self.add_error("handoff_trigger", "This trigger is already used by another agent.")
        problems = validate_agent_fields(
            data,
            file="admin",
            known_tools=agent_tool_names(),
            tool_prefixes=mcp_server_names(),
            handoff_triggers=triggers,
            allowed_variables=template_variables_allowed(name, catalog.scenarios.values()),
            voices_dir=settings.CONFIG.TTS_VOICES_DIR,
        )
        for problem in problems:
            if not problem.is_error or problem.field.startswith("turn_taking"):
                continue  # the turn-taking fields were checked above, each on its own field
            target = problem.field.split(".")[0].split("[")[0]
            self.add_error(target if target in self.fields else None, problem.message)
        return cleaned


# the typed fields declared on the class (the admin's fieldsets may only name declared fields)
AgentForm = type("AgentForm", (AgentFormBase,), {**model_fields(), **turn_taking_fields()})


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = (
        "name",
        "source",
        "handoff_trigger",
        "model",
        "temperature",
        "has_overrides",
        "served",
        "updated_at",
    )
    list_filter = ("source", "model")
    search_fields = ("name", "description", "handoff_trigger")
    readonly_fields = ("source", "origin", "overrides", definition_problems, "created_at", "updated_at")
    actions = ["reset_to_file"]
    fieldsets = (
        (
            None,
            {"fields": ("name", "description", "greeting", "return_greeting", "handoff_trigger", "tools")},
        ),
        ("Prompt", {"fields": ("prompt",)}),
        ("Model", {"fields": ("model", "temperature", "top_p", "max_tokens")}),
        ("Voice and speech", {"fields": ("voice", "voice_style", "voice_rate", "vad_silence_timeout_ms")}),
        ("Turn-taking (empty: the global setting)", {"fields": TURN_TAKING_FORM_FIELDS}),
        (
            "Origin",
            {"fields": ("source", "origin", "overrides", definition_problems, "created_at", "updated_at")},
        ),
    )

    @admin.display(boolean=True, description="overridden")
    def has_overrides(self, obj: Agent) -> bool:
        return bool(obj.overrides)

    @admin.display(boolean=True, description="served")
    def served(self, obj: Agent) -> bool:
        return not obj.problems

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.source == "file":
            fields.append("name")  # the file owns the name
        return fields

    def save_model(self, request, obj: Agent, form, change):
        if change and obj.source == "file":
            for field_name in form.changed_data:
                if field_name in AGENT_FIELDS:
                    obj.set_override(field_name, form.cleaned_data[field_name])
        if not change:
            obj.source = "admin"
        super().save_model(request, obj, form, change)
        _bump_after_commit()

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        _bump_after_commit()

    @admin.action(description="Reset selected file agents to their definition file")
    def reset_to_file(self, request, queryset):
        count = 0
        for agent in queryset.filter(source="file"):
            agent.reset_to_file()
            agent.save()
            count += 1
        _bump_after_commit()
        self.message_user(request, f"{count} agent(s) reset to their files.", messages.SUCCESS)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.display(description="time", ordering="at")
def turn_time(obj: HistoryTurn | HandoffRecord) -> str:
    """Stored as epoch seconds (the REST contract's ``at``); read as a date."""
    return epoch_text(obj.at)


class HistoryInline(ReadOnlyInline):
    model = HistoryTurn
    fields = (turn_time, "role", "agent", "tool_name", "content")
    readonly_fields = fields


class HandoffRecordInline(ReadOnlyInline):
    model = HandoffRecord
    fields = (turn_time, "from_agent", "to_agent", "type")
    readonly_fields = fields


@admin.register(Session)
class SessionAdmin(RecordingAdminMixin, admin.ModelAdmin):
    list_display = ("session_id", "scenario", "transport", "created_at", "last_activity_at")
    list_filter = ("transport", "scenario")
    search_fields = ("session_id", "scenario")
    readonly_fields = (
        "session_id",
        "scenario",
        "transport",
        "previous_session_id",
        "created_at",
        "last_activity_at",
    )
    inlines = [HistoryInline, HandoffRecordInline]
    change_form_template = "admin/agents_app/session/change_form.html"

    def has_add_permission(self, request) -> bool:
        return False

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The session's page, with the conversation viewer (:mod:`agents_app.conversation_view`)
        and a player of its recording when there is one."""
        session = self.get_object(request, unquote(object_id))  # the URL holds it quoted (":" is "_3A")
        extra_context = dict(extra_context or {})
        if session is not None:
            extra_context["conversation"] = conversation_rows(session)
            extra_context["recording_url"] = player_url(session.session_id)
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(HistoryTurn)
class HistoryTurnAdmin(admin.ModelAdmin):
    list_display = ("session", "role", "agent", "tool_name", "short_content", turn_time)
    readonly_fields = (turn_time,)
    exclude = ("at",)
    list_filter = ("role", "agent")
    search_fields = ("session__session_id", "content")

    @admin.display(description="content")
    def short_content(self, obj: HistoryTurn) -> str:
        return obj.content[:80]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(DemoProfile)
class DemoProfileAdmin(admin.ModelAdmin):
    list_display = ("id", "full_name", "scenario", "seed", "session_id", "created_at", "expires_at")
    list_filter = ("scenario",)
    search_fields = ("id", "full_name", "session_id")
    readonly_fields = (
        "id",
        "full_name",
        "scenario",
        "seed",
        "session_id",
        "data",
        "created_at",
        "expires_at",
    )

    def has_add_permission(self, request) -> bool:
        return False
