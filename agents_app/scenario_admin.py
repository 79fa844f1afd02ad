"""Admin of scenarios: fields, handoffs inline (validated as a whole with the loader's rules), the
scenario's picture on its page (:mod:`agents_app.scenario_graph`), and the "Run agent tests"
action."""

from __future__ import annotations

import re

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from agents_app.admin_forms import TemplateVariablesField, agent_choices, definition_problems
from agents_app.catalog import catalog
from agents_app.definitions import validate_scenario
from agents_app.eval_jobs import ADMIN_EVALS_TIMEOUT_S, job_state, run_inline, start_job
from agents_app.models import SCENARIO_FIELDS, Agent, Scenario, ScenarioHandoff
from agents_app.scenario_graph import GraphUnavailable, picture_of_row, render_svg

__all__ = ["ScenarioAdmin", "run_agent_tests_for", "scenario_picture"]


def _bump_after_commit() -> None:
    transaction.on_commit(catalog.bump)


def scenario_picture(row: Scenario) -> tuple[str, str]:
    """(inline SVG, "") of a saved scenario, or ("", why there is none)."""
    names = [n for n in (row.agents or []) if isinstance(n, str)]
    tools = {a.name: list(a.tools or []) for a in Agent.objects.filter(name__in=names)}
    try:
        return render_svg(picture_of_row(row, tools), inline=True), ""
    except GraphUnavailable as exc:
        return "", str(exc)


def _scenario_data(scenario: Scenario, handoffs: list[dict]) -> dict:
    return {
        "name": scenario.name,
        "description": scenario.description,
        "start_agent": scenario.start_agent,
        "agents": list(scenario.agents or []),
        "agent_defaults": dict(scenario.agent_defaults or {}),
        "handoffs": handoffs,
        "transfer_target": scenario.transfer_target or None,
    }


def _scenario_problems(data: dict) -> list:
    catalog.ensure_current()
    agents = {a.name: a for a in catalog.agents.values()}
    return [p for p in validate_scenario(data, agents, file="admin") if p.is_error]


class ScenarioForm(forms.ModelForm):
    """A scenario: its agents ticked from the list, its start agent a select; the loader's rules
    on the fields (the handoffs are checked with the rows, :class:`HandoffFormSet`)."""

    agents = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple, help_text="The agents taking part in this scenario."
    )
    start_agent = forms.ChoiceField(help_text="The agent that answers first (one of the agents ticked).")
    agent_defaults = TemplateVariablesField()

    class Meta:
        model = Scenario
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agents"].choices = agent_choices()
        self.fields["start_agent"].choices = agent_choices(blank=True)

    def clean(self):
        cleaned = super().clean()
        fields = {
            k: cleaned.get(k) for k in ("name", "description", "start_agent", "agents", "agent_defaults")
        }
        if any(fields[k] in (None, "") for k in ("name", "start_agent")) or not fields["agents"]:
            return cleaned  # the required fields said so already
        data = {
            **fields,
            "agents": list(fields["agents"]),
            "agent_defaults": dict(fields["agent_defaults"] or {}),
            "handoffs": [],
            "transfer_target": cleaned.get("transfer_target") or None,
        }
        for problem in _scenario_problems(data):
            target = problem.field.split(".")[0].split("[")[0]
            if target in self.fields and target not in self.errors:
                self.add_error(target, problem.message)
            elif target not in self.fields:
                self.add_error(None, f"{problem.field}: {problem.message}")
        return cleaned


class HandoffForm(forms.ModelForm):
    """One handoff row: from and to agents, the trigger tool and the type, all selects."""

    from_agent = forms.ChoiceField(label="from")
    to_agent = forms.ChoiceField(label="to")
    tool = forms.ChoiceField(label="trigger tool", help_text="the target agent's handoff trigger")

    class Meta:
        model = ScenarioHandoff
        fields = ("from_agent", "to_agent", "tool", "type")

    def __init__(self, *args, agents: list | None = None, triggers: list | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        agents = agent_choices(blank=True) if agents is None else agents
        self.fields["from_agent"].choices = agents
        self.fields["to_agent"].choices = agents
        triggers = list(trigger_choices() if triggers is None else triggers)
        known = {t for t, _label in triggers}
        current = self.data.get(self.add_prefix("tool")) if self.is_bound else self.initial.get("tool")
        if current and current not in known:
            triggers.append((current, f"{current} (no agent has this trigger)"))
        self.fields["tool"].choices = [("", "---------"), *triggers]


def trigger_choices() -> list[tuple[str, str]]:
    """Each agent's handoff trigger, labelled with the agent it hands the caller to."""
    agents = Agent.objects.exclude(handoff_trigger__isnull=True).exclude(handoff_trigger="").order_by("name")
    return [(a.handoff_trigger, f"{a.handoff_trigger} (to {a.name})") for a in agents]


HANDOFF_FIELDS = {"from": "from_agent", "to": "to_agent", "tool": "tool", "type": "type"}


class HandoffFormSet(forms.BaseInlineFormSet):
    """Validates the whole scenario (fields + handoffs) with the loader's rules; a handoff's
    problem goes to its row's field. The rows' choices are read once for all of them."""

    def get_form_kwargs(self, index):
        kwargs = super().get_form_kwargs(index)
        if not hasattr(self, "_choices"):
            self._choices = {"agents": agent_choices(blank=True), "triggers": trigger_choices()}
        return {**kwargs, **self._choices}

    def clean(self):
        super().clean()
        if any(self.errors):
            return
        rows = [f for f in self.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
        handoffs = [{key: f.cleaned_data[name] for key, name in HANDOFF_FIELDS.items()} for f in rows]
        scenario_level = []
        for problem in _scenario_problems(_scenario_data(self.instance, handoffs)):
            match = re.match(r"handoffs\[(\d+)\](?:\.(\w+))?", problem.field)
            if match and int(match.group(1)) < len(rows):
                form = rows[int(match.group(1))]
                field = HANDOFF_FIELDS.get(match.group(2) or "")
                form.add_error(field if field in form.fields else None, problem.message)
            elif problem.field.startswith("handoffs"):
                scenario_level.append(f"{problem.field}: {problem.message}")
        if scenario_level:
            raise ValidationError(scenario_level)


class ScenarioHandoffInline(admin.TabularInline):
    model = ScenarioHandoff
    form = HandoffForm
    formset = HandoffFormSet
    extra = 1


@admin.register(Scenario)
class ScenarioAdmin(admin.ModelAdmin):
    form = ScenarioForm
    list_display = ("name", "source", "start_agent", "agent_count", "served", "updated_at")
    list_filter = ("source",)
    search_fields = ("name", "description")
    readonly_fields = ("source", "origin", "overrides", definition_problems, "created_at", "updated_at")
    inlines = [ScenarioHandoffInline]
    actions = ["run_agent_tests"]
    change_form_template = "admin/agents_app/scenario/change_form.html"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The scenario's page, with its picture as saved."""
        row = self.get_object(request, unquote(object_id))
        extra_context = dict(extra_context or {})
        if row is not None:
            extra_context["graph_svg"], extra_context["graph_problem"] = scenario_picture(row)
            extra_context["graph_url"] = f"/api/v1/scenarios/{row.name}/graph.svg"
        return super().change_view(request, object_id, form_url, extra_context)

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
        """Start the built-in agent tests (fixtures/evals) of the selected scenarios in the
        background (:mod:`agents_app.eval_jobs`) and go to the page that follows them: the quick
        check after editing an agent or a handoff, without a request waiting for it."""
        job_id, started = start_job(sorted(s.name for s in queryset))
        if not started:
            self.message_user(
                request, "Agent tests are already running here: this is that run.", messages.WARNING
            )
        return HttpResponseRedirect(reverse("admin:agents_app_scenario_tests", args=[job_id]))

    def get_urls(self):
        view = self.admin_site.admin_view(self.tests_view)
        own = [path("tests/<str:job_id>/", view, name="agents_app_scenario_tests")]
        return own + super().get_urls()

    def tests_view(self, request, job_id: str):
        """A run's progress, then its results; the page reloads itself while the run goes on."""
        state = job_state(job_id) if JOB_ID.fullmatch(job_id) else None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Agent tests",
            "job_missing": state is None,
        }
        if state is not None:
            context.update(report_context(state))
            context["title"] = f"Agent tests: {', '.join(state['scenarios'])}"
        response = TemplateResponse(request, "admin/evals_report.html", context)
        if state is None:
            response.status_code = 404
        return response


JOB_ID = re.compile(r"[0-9a-f]{32}")


def report_context(state: dict) -> dict:
    """The report page's context from a job's state (running or done)."""
    return {
        **state,
        "not_run": state["pending"] if state["done"] else [],
        "running_test": state.get("running"),
        "refresh_s": 0 if state["done"] else 2,
    }


def run_agent_tests_for(scenarios: list[str], timeout_s: float = ADMIN_EVALS_TIMEOUT_S) -> dict:
    """The suites of ``scenarios`` run on the engine target and waited for, as the report page's
    context (what the background job shows when it is done)."""
    return report_context(run_inline(scenarios, timeout_s))
