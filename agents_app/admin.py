"""Admin for agents, scenarios (handoffs inline; an action runs their agent tests), sessions
(history read-only, with a conversation viewer) and demo profiles.

Forms run the same validators as the file loader (:mod:`agents_app.definitions`) and show their
problems on the offending field. Saving an edit of a file agent stores it as an override that
survives restarts (see :mod:`agents_app.models`); every save tells all workers to reload.
"""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.template.response import TemplateResponse

from agents_app.catalog import (
    agent_tool_names,
    catalog,
    mcp_server_names,
    template_variables_allowed,
)
from agents_app.conversation_view import conversation_rows
from agents_app.definitions import check_turn_taking, validate_agent_fields, validate_scenario
from agents_app.models import (
    AGENT_FIELDS,
    SCENARIO_FIELDS,
    Agent,
    DemoProfile,
    HandoffRecord,
    HistoryTurn,
    Scenario,
    ScenarioHandoff,
    Session,
)


def _bump_after_commit() -> None:
    transaction.on_commit(catalog.bump)


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = ("name", *AGENT_FIELDS)
        widgets = {
            "prompt": forms.Textarea(attrs={"rows": 20, "cols": 100, "style": "font-family: monospace"}),
            "turn_taking": forms.Textarea(attrs={"rows": 8, "cols": 100, "style": "font-family: monospace"}),
        }

    def clean_turn_taking(self):
        """The section checked by the loader's rules and stored as checked (lines trimmed); an
        empty box is an empty section (every setting global), never a JSON null."""
        problems: list[str] = []
        values = check_turn_taking(
            self.cleaned_data.get("turn_taking"),
            lambda field, message: problems.append(f"{field}: {message}"),
        )
        if problems:
            raise ValidationError(problems)
        return values

    def clean(self):
        cleaned = super().clean()
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
            if not problem.is_error:
                continue
            target = problem.field.split(".")[0].split("[")[0]
            self.add_error(target if target in self.fields else None, problem.message)
        return cleaned


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
    readonly_fields = ("source", "origin", "overrides", "problems", "created_at", "updated_at")
    actions = ["reset_to_file"]
    fieldsets = (
        (
            None,
            {"fields": ("name", "description", "greeting", "return_greeting", "handoff_trigger", "tools")},
        ),
        ("Prompt", {"fields": ("prompt",)}),
        ("Model", {"fields": ("model", "temperature", "top_p", "max_tokens")}),
        ("Voice and speech", {"fields": ("voice", "voice_style", "voice_rate", "vad_silence_timeout_ms")}),
        ("Turn-taking", {"fields": ("turn_taking",)}),
        ("Origin", {"fields": ("source", "origin", "overrides", "problems", "created_at", "updated_at")}),
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


class HandoffFormSet(forms.BaseInlineFormSet):
    """Validates the whole scenario (fields + handoffs) with the loader's rules."""

    def clean(self):
        super().clean()
        if any(self.errors):
            return
        scenario = self.instance
        handoffs = [
            {
                "from": f.cleaned_data["from_agent"],
                "to": f.cleaned_data["to_agent"],
                "tool": f.cleaned_data["tool"],
                "type": f.cleaned_data["type"],
            }
            for f in self.forms
            if f.cleaned_data and not f.cleaned_data.get("DELETE")
        ]
        data = {
            "name": scenario.name,
            "description": scenario.description,
            "start_agent": scenario.start_agent,
            "agents": list(scenario.agents or []),
            "agent_defaults": dict(scenario.agent_defaults or {}),
            "handoffs": handoffs,
        }
        catalog.ensure_current()
        agents = {a.name: a for a in catalog.agents.values()}
        problems = [p for p in validate_scenario(data, agents, file="admin") if p.is_error]
        if problems:
            raise ValidationError([f"{p.field}: {p.message}" for p in problems])


class ScenarioHandoffInline(admin.TabularInline):
    model = ScenarioHandoff
    formset = HandoffFormSet
    extra = 1


@admin.register(Scenario)
class ScenarioAdmin(admin.ModelAdmin):
    list_display = ("name", "source", "start_agent", "agent_count", "served", "updated_at")
    list_filter = ("source",)
    search_fields = ("name", "description")
    readonly_fields = ("source", "origin", "overrides", "problems", "created_at", "updated_at")
    inlines = [ScenarioHandoffInline]
    actions = ["run_agent_tests"]

    @admin.display(description="agents")
    def agent_count(self, obj: Scenario) -> int:
        return len(obj.agents or [])

    @admin.display(boolean=True, description="served")
    def served(self, obj: Scenario) -> bool:
        return not obj.problems

    def save_model(self, request, obj: Scenario, form, change):
        if change and obj.source == "file":
            for field_name in form.changed_data:
                if field_name in SCENARIO_FIELDS:
                    obj.overrides[field_name] = form.cleaned_data[field_name]
        if not change:
            obj.source = "admin"
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        obj = form.instance
        if change and obj.source == "file" and any(fs.has_changed() for fs in formsets):
            obj.overrides["handoffs"] = True  # keep the admin's handoffs over the file's on restart
            obj.save(update_fields=["overrides"])
        _bump_after_commit()

    @admin.action(description="Run agent tests")
    def run_agent_tests(self, request, queryset):
        """Run the built-in agent tests (fixtures/evals) of the selected scenarios on the in-process
        engine and show each test's outcome: the quick check after editing an agent or a handoff."""
        names = sorted(s.name for s in queryset)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Agent tests: {', '.join(names)}",
            "opts": self.model._meta,
            **run_agent_tests_for(names),
        }
        return TemplateResponse(request, "admin/evals_report.html", context)


ADMIN_EVALS_TIMEOUT_S = 300.0  # the action answers within this, with the tests that finished by then
EVAL_STATUSES = ("passed", "failed", "error", "skipped")


def run_agent_tests_for(scenarios: list[str], timeout_s: float = ADMIN_EVALS_TIMEOUT_S) -> dict:
    """The suites of ``scenarios`` run on the engine target, as the report page's context:
    ``results`` (the :class:`~agents_app.evals.runner.TestResult` of each finished test),
    ``not_run`` (tests the time bound cut off), ``problems`` (the suite files' errors), counts."""
    from agents_app.evals import runner, spec, targets
    from agents_app.evals.engine_target import stop_engine
    from agents_app.evals.judge import judge_for_runtime

    wanted = {name.lower() for name in scenarios}
    try:
        tests = [t for t in spec.load_suites([spec.DEFAULT_DIR]) if t.scenario.lower() in wanted]
    except spec.SpecError as exc:
        return {"problems": exc.problems, "results": [], "not_run": [], "counts": {}}
    results: list = []

    async def bounded() -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                make = targets.make_target("engine")
                await runner.run(tests, make, on_result=results.append, judge=judge_for_runtime())
        except TimeoutError:
            return True
        finally:
            await stop_engine()  # only what the run started (a service's own providers stay)
        return False

    timed_out = async_to_sync(bounded)()
    finished = {id(r.test) for r in results}
    counts = {status: sum(r.status == status for r in results) for status in EVAL_STATUSES}
    return {
        "problems": [],
        "results": results,
        "not_run": [t for t in tests if id(t) not in finished],
        "timed_out": timed_out,
        "timeout_s": timeout_s,
        "counts": counts,
        "ok": bool(results) and not timed_out and counts["failed"] == counts["error"] == 0,
    }


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class HistoryInline(ReadOnlyInline):
    model = HistoryTurn
    fields = ("at", "role", "agent", "tool_name", "content")
    readonly_fields = fields


class HandoffRecordInline(ReadOnlyInline):
    model = HandoffRecord
    fields = ("at", "from_agent", "to_agent", "type")
    readonly_fields = fields


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
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
        """The session's page, with the conversation viewer (:mod:`agents_app.conversation_view`)."""
        session = self.get_object(request, object_id)
        extra_context = dict(extra_context or {})
        if session is not None:
            extra_context["conversation"] = conversation_rows(session)
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(HistoryTurn)
class HistoryTurnAdmin(admin.ModelAdmin):
    list_display = ("session", "role", "agent", "tool_name", "short_content", "at")
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
