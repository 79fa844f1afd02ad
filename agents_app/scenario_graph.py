"""A picture of a scenario: its agents as nodes (the start agent marked, each with its tools),
its handoffs as arrows labelled with the trigger tool and the type (announced / discrete).

Why Graphviz's ``dot`` as a subprocess: the layout is the layout library's, never coordinates
placed here, and a subprocess is bounded for real: a scenario an operator made as large or as
tangled as they like costs at most :data:`RENDER_TIMEOUT_S` of one process, then it is killed
and the page says so (:class:`GraphUnavailable`). Operator text never reaches the DOT source
unescaped: nodes get synthetic ids (``a0``, ``a1``, ...; Graphviz writes ids into the SVG's
titles and comments) and every name, description and tool is HTML-escaped inside HTML-like
labels, which Graphviz writes back escaped into the SVG text.
"""

from __future__ import annotations

import functools
import html
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GraphUnavailable",
    "ScenarioPicture",
    "picture_of_row",
    "picture_of_spec",
    "render_svg",
    "scenario_dot",
]

RENDER_TIMEOUT_S = 3.0
# what is drawn at most: a picture past these is unreadable anyway, and within them Graphviz
# takes ~1 s on this machine's core (50 agents, 300 handoffs: 0.6 s), so the timeout is a backstop
MAX_AGENTS = 60
MAX_HANDOFFS = 400
MAX_SVG_BYTES = 2_000_000
MAX_TOOLS_SHOWN = 12  # per agent; "+N more" beyond
MAX_TEXT = 60  # characters of one name or tool shown
COLORS = {"announced": "#264b5d", "discrete": "#8a6d00"}


class GraphUnavailable(Exception):
    """No picture: Graphviz is not installed, took too long, or failed (said in one sentence)."""


@dataclass(frozen=True)
class ScenarioPicture:
    """What the picture shows, as plain data (from a served spec or from admin rows)."""

    name: str
    start_agent: str
    agents: tuple[str, ...]
    handoffs: tuple[tuple[str, str, str, str], ...]  # (from, to, tool, type)
    tools: Mapping[str, tuple[str, ...]]  # agent -> its tools (handoff triggers included)

    @classmethod
    def build(
        cls,
        name: str,
        start_agent: str,
        agents: Iterable[str],
        handoffs: Iterable[tuple[str, str, str, str]],
        tools: Mapping[str, Iterable[str]],
    ) -> ScenarioPicture:
        return cls(
            name=name,
            start_agent=start_agent,
            agents=tuple(agents),
            handoffs=tuple(handoffs),
            tools={agent: tuple(found) for agent, found in tools.items()},
        )


def picture_of_spec(spec: Any, agents: Mapping[str, Any]) -> ScenarioPicture:
    """A served scenario (``ScenarioSpec``) with its agents' specs (by name)."""
    return ScenarioPicture.build(
        spec.name,
        spec.start_agent,
        spec.agents,
        [(h.from_agent, h.to_agent, h.tool, h.type) for h in spec.handoffs],
        {name: agents[name].tools for name in spec.agents if name in agents},
    )


def picture_of_row(row: Any, tools: Mapping[str, Iterable[str]]) -> ScenarioPicture:
    """A scenario as saved in the admin (``agents_app.models.Scenario`` and its handoff rows);
    ``tools``: each agent's tools by name."""
    names = [str(n) for n in (row.agents or []) if isinstance(n, str)]
    return ScenarioPicture.build(
        row.name,
        row.start_agent,
        names,
        [(h.from_agent, h.to_agent, h.tool, h.type) for h in row.handoffs.all()],
        {name: tools[name] for name in names if name in tools},
    )


def _text(value: str) -> str:
    value = str(value)
    if len(value) > MAX_TEXT:
        value = value[: MAX_TEXT - 1] + "…"
    return html.escape(value, quote=True)


def _node_label(agent: str, start: bool, tools: tuple[str, ...], triggers: set[str]) -> str:
    rows = [f"<TR><TD><B>{_text(agent)}</B></TD></TR>"]
    if start:
        rows.append('<TR><TD><FONT POINT-SIZE="10" COLOR="#417690">start agent</FONT></TD></TR>')
    own = [t for t in tools if t not in triggers]
    for tool in own[:MAX_TOOLS_SHOWN]:
        rows.append(f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="10">{_text(tool)}</FONT></TD></TR>')
    if len(own) > MAX_TOOLS_SHOWN:
        rows.append(
            f'<TR><TD ALIGN="LEFT"><FONT POINT-SIZE="10">+{len(own) - MAX_TOOLS_SHOWN} more</FONT></TD></TR>'
        )
    if not own:
        rows.append('<TR><TD><FONT POINT-SIZE="10" COLOR="#666666">no tools</FONT></TD></TR>')
    return '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="1">' + "".join(rows) + "</TABLE>>"


def scenario_dot(picture: ScenarioPicture) -> str:
    """The DOT source of ``picture`` (only synthetic ids and escaped HTML-like labels in it)."""
    ids = {agent: f"a{i}" for i, agent in enumerate(picture.agents)}
    triggers = {tool for _f, _t, tool, _k in picture.handoffs}
    lines = [
        "digraph scenario {",
        '  graph [rankdir=LR, fontname="Helvetica", nodesep=0.5, ranksep=1.1, bgcolor="transparent"];',
        '  node [shape=box, style="rounded,filled", fillcolor="#f8f8f8", color="#264b5d",'
        ' fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  start [shape=circle, label="", width=0.18, style=filled, fillcolor="#417690", color="#417690"];',
    ]
    for agent, node in ids.items():
        is_start = agent == picture.start_agent
        extra = ', penwidth=2.5, fillcolor="#eef5f8"' if is_start else ""
        label = _node_label(agent, is_start, picture.tools.get(agent, ()), triggers)
        lines.append(f"  {node} [label={label}{extra}];")
    if picture.start_agent in ids:
        lines.append(f'  start -> {ids[picture.start_agent]} [color="#417690"];')
    for source, target, tool, kind in picture.handoffs:
        if source not in ids or target not in ids:
            continue  # a handoff to an agent outside the scenario: the form says so, not the picture
        color = COLORS.get(kind, "#444444")
        style = "dashed" if kind == "discrete" else "solid"
        label = f"<{_text(tool)}<BR/><I>{_text(kind)}</I>>"
        lines.append(
            f"  {ids[source]} -> {ids[target]}"
            f' [label={label}, color="{color}", fontcolor="{color}", style={style}];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=64)
def _render(dot_source: str, timeout_s: float) -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphUnavailable(
            "Graphviz is not installed (the graphviz system package: scripts/_setup.sh installs it)"
        )
    try:
        done = subprocess.run(
            [exe, "-Tsvg"], input=dot_source.encode(), capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise GraphUnavailable(f"the picture took longer than {timeout_s:g} s to lay out") from None
    if done.returncode != 0 or not done.stdout:
        raise GraphUnavailable("Graphviz could not lay out this scenario")
    if len(done.stdout) > MAX_SVG_BYTES:
        raise GraphUnavailable("the picture is too large to show")
    return done.stdout.decode("utf-8", "replace")


def render_svg(picture: ScenarioPicture, *, inline: bool = False, timeout_s: float = RENDER_TIMEOUT_S) -> str:
    """The picture as an SVG document (``inline``: only the ``<svg>`` element, for a page).
    :class:`GraphUnavailable` when there is none; results are cached by DOT source."""
    if len(picture.agents) > MAX_AGENTS or len(picture.handoffs) > MAX_HANDOFFS:
        raise GraphUnavailable(
            f"the scenario is too large to draw ({len(picture.agents)} agents, {len(picture.handoffs)} "
            f"handoffs; at most {MAX_AGENTS} and {MAX_HANDOFFS})"
        )
    svg = _render(scenario_dot(picture), timeout_s)
    if inline:
        svg = svg[svg.index("<svg") :]
    return svg
