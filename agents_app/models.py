"""Agents, scenarios, sessions, history and demo profiles in the database.

File vs admin rule (documented in the README):

- Definition files are the source of the built-in agents and scenarios. Every start upserts them
  (``source="file"``): the row's ``file_values`` are replaced by what the file says.
- An operator's edit (admin form or ``PUT /agents/{name}``) of a file agent is stored in
  ``overrides`` (field -> value). Effective value = file value, then the override on top. So
  admin edits survive restarts, and file changes to fields nobody overrode apply on restart.
  "Reset to file" (admin action) clears the overrides.
- Agents and scenarios created in admin have ``source="admin"``; the loader never touches them.
- Session-scoped agents and scenarios (``POST /agents``, ``POST /scenarios``) live in the
  session's cache entry, not here: they expire with the session.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.functions import Lower

AGENT_FIELDS = (
    "description",
    "greeting",
    "return_greeting",
    "handoff_trigger",
    "tools",
    "prompt",
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "voice",
    "voice_style",
    "voice_rate",
    "vad_silence_timeout_ms",
    "turn_taking",
)
RUNTIME_FIELDS = (
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "voice",
    "voice_style",
    "voice_rate",
    "greeting",
    "turn_taking",
)
SCENARIO_FIELDS = (
    "description",
    "start_agent",
    "agents",
    "agent_defaults",
    "transfer_target",
    "recording",
    "recording_announcement",
)
SOURCES = [("file", "definition file"), ("admin", "admin")]
HANDOFF_TYPES = [("announced", "announced"), ("discrete", "discrete")]


class Agent(models.Model):
    """A built-in agent: effective fields = file values + operator overrides."""

    name = models.CharField(max_length=64)
    description = models.TextField(blank=True, default="")
    greeting = models.TextField(blank=True, default="")
    return_greeting = models.TextField(blank=True, default="")
    handoff_trigger = models.CharField(max_length=64, blank=True, null=True)
    tools = models.JSONField(default=list, blank=True)
    prompt = models.TextField(help_text="Jinja2 template (sandboxed)")
    model = models.CharField(max_length=100, blank=True, null=True)
    temperature = models.FloatField(blank=True, null=True)
    top_p = models.FloatField(blank=True, null=True)
    max_tokens = models.PositiveIntegerField(blank=True, null=True)
    voice = models.CharField(max_length=100, blank=True, null=True)
    voice_style = models.CharField(max_length=50, blank=True, null=True)
    voice_rate = models.CharField(max_length=20, blank=True, null=True)
    vad_silence_timeout_ms = models.PositiveIntegerField(blank=True, null=True)
    turn_taking = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "Turn-taking overrides (absent keys follow the global settings): min_interruption_ms, "
            "endpointing_max_ms, filler_after_ms, fillers (1-10 lines), reprompt_after_s, "
            "max_reprompts, reprompt, goodbye, max_conversation_s, time_limit_line"
        ),
    )
    source = models.CharField(max_length=10, choices=SOURCES, default="admin")
    origin = models.CharField(max_length=500, blank=True, default="", help_text="definition file")
    file_values = models.JSONField(default=dict, blank=True, editable=False)
    overrides = models.JSONField(default=dict, blank=True, editable=False)
    problems = models.JSONField(
        default=list, blank=True, editable=False, help_text="validation problems: not served"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(Lower("name"), name="agent_name_ci_unique")]

    def __str__(self) -> str:
        return self.name

    def values(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in AGENT_FIELDS}

    def apply_file(self, file_values: dict[str, Any]) -> None:
        """Take the file's values, keeping operator overrides on top."""
        self.file_values = file_values
        for field_name in AGENT_FIELDS:
            value = self.overrides.get(field_name, file_values.get(field_name))
            setattr(self, field_name, _field_default(self, field_name) if value is None else value)

    def set_override(self, field_name: str, value: Any) -> None:
        """An operator edit: persists over file reloads for file agents."""
        if isinstance(value, str):
            value = value.replace("\r\n", "\n")
        setattr(self, field_name, value)
        if self.source == "file":
            file_value = self.file_values.get(field_name)
            same = file_value == value or (
                isinstance(value, str) and isinstance(file_value, str) and value.strip() == file_value.strip()
            )
            if same:
                self.overrides.pop(field_name, None)
                setattr(self, field_name, file_value)
            else:
                self.overrides[field_name] = value

    def reset_to_file(self) -> None:
        self.overrides = {}
        self.apply_file(self.file_values)


def _field_default(obj: models.Model, field_name: str) -> Any:
    field = obj._meta.get_field(field_name)
    if field.null:
        return None
    return field.get_default()


class Scenario(models.Model):
    """A built-in scenario: agents, start agent, handoffs (inline), prompt variables."""

    name = models.CharField(max_length=64)
    description = models.TextField(blank=True, default="")
    start_agent = models.CharField(max_length=64)
    agents = models.JSONField(default=list, help_text="agent names taking part")
    agent_defaults = models.JSONField(default=dict, blank=True, help_text="variables for prompt templates")
    transfer_target = models.CharField(
        max_length=220,
        blank=True,
        default="",
        help_text="where escalate_to_human transfers a phone call: +E.164 number or ACS user (8:acs:...)",
    )
    recording = models.BooleanField(
        null=True,
        blank=True,
        default=None,
        help_text="record its conversations (unknown: as RECORDING_ENABLED)",
    )
    recording_announcement = models.CharField(
        max_length=500, blank=True, default="", help_text="said before the greeting when recorded (consent)"
    )
    source = models.CharField(max_length=10, choices=SOURCES, default="admin")
    origin = models.CharField(max_length=500, blank=True, default="")
    file_values = models.JSONField(default=dict, blank=True, editable=False)
    overrides = models.JSONField(default=dict, blank=True, editable=False)
    problems = models.JSONField(
        default=list, blank=True, editable=False, help_text="validation problems: not served"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(Lower("name"), name="scenario_name_ci_unique")]

    def __str__(self) -> str:
        return self.name


class ScenarioHandoff(models.Model):
    scenario = models.ForeignKey(Scenario, on_delete=models.CASCADE, related_name="handoffs")
    from_agent = models.CharField(max_length=64)
    to_agent = models.CharField(max_length=64)
    tool = models.CharField(max_length=64)
    type = models.CharField(max_length=10, choices=HANDOFF_TYPES, default="announced")

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["scenario", "from_agent", "to_agent"], name="handoff_edge_unique")
        ]

    def __str__(self) -> str:
        return f"{self.from_agent} -> {self.to_agent} ({self.type})"


class Session(models.Model):
    """A conversation's durable record; live state is in the session cache."""

    session_id = models.CharField(max_length=128, primary_key=True)
    scenario = models.CharField(max_length=64, blank=True, default="")
    transport = models.CharField(max_length=20, blank=True, null=True)
    previous_session_id = models.CharField(max_length=128, blank=True, null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_activity_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.session_id


class HistoryTurn(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turns")
    role = models.CharField(max_length=10)
    content = models.TextField()
    agent = models.CharField(max_length=64, blank=True, null=True)
    tool_name = models.CharField(max_length=128, blank=True, null=True)
    at = models.FloatField(help_text="epoch seconds")
    # an assistant turn's timings and usage (voiceagent.conversation.timing); None for other roles
    latency_ms = models.JSONField(blank=True, null=True)
    usage = models.JSONField(blank=True, null=True)
    # an assistant turn: how much the caller heard (voiceagent.conversation.session.HEARD_*); a reply
    # is written when sent ("unknown", with a uid) and corrected to "played" or "cut" once known
    heard = models.CharField(max_length=8, blank=True, null=True)
    uid = models.CharField(max_length=32, blank=True, null=True, db_index=True)
    # a tool turn: the model's call id and the arguments it called the tool with
    tool_call_id = models.CharField(max_length=128, blank=True, null=True)
    tool_arguments = models.JSONField(blank=True, null=True)
    # who said it when not the agent or the caller: "person" (a human who took the conversation over)
    speaker = models.CharField(max_length=16, blank=True, null=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["session", "at"])]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"


class HandoffRecord(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="handoff_records")
    from_agent = models.CharField(max_length=64)
    to_agent = models.CharField(max_length=64)
    type = models.CharField(max_length=10)
    at = models.FloatField()

    class Meta:
        ordering = ["at", "id"]


class DemoProfile(models.Model):
    id = models.CharField(max_length=64, primary_key=True)
    scenario = models.CharField(max_length=20, default="banking")
    seed = models.BigIntegerField()
    full_name = models.CharField(max_length=100)
    data = models.JSONField()
    session_id = models.CharField(max_length=128, blank=True, null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.full_name} ({self.id})"
