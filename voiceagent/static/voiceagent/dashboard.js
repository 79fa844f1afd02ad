/* Live dashboard: every server message of all sessions (or one) through /api/v1/browser/dashboard/relay.
   On connect the relay sends a session_started with snapshot: true per conversation already live. */
"use strict";

const $ = (id) => document.getElementById(id);
const sessions = new Map();  // session id -> {agent, state, transport}
let relay = null;
let followed = "";
const keys = keyPrompt(() => open(followed));

function open(sessionId) {
  if (relay) { relay.replaced = true; relay.close(1000); }
  followed = sessionId || "";
  $("followed").textContent = followed || "all sessions";
  $("feed").innerHTML = "";
  if (!followed) { sessions.clear(); renderSessions(); }  // the snapshot lists them again
  $("relay-state").textContent = "Connecting…";
  const ws = new WebSocket(wsUrl("/api/v1/browser/dashboard/relay", { session_id: followed }));
  relay = ws;
  ws.onclose = (e) => {
    if (ws.replaced) return;
    if (isAuthClose(e)) keys.show(e.reason);
    $("relay-state").textContent = `Disconnected. ${describeClose(e)}`;
  };
  ws.onmessage = (e) => onMessage(JSON.parse(e.data));
}

function describe(m) {
  const p = m.payload || {};
  switch (m.type) {
    case "transcript": return `caller${p.final ? "" : " (…)"}: ${p.text}`;
    case "response": return p.final ? `${p.agent}: ${p.text}` : null;
    case "event":
      if (p.name === "handoff") return `handoff ${p.from} → ${p.to} (${p.type})`;
      if (p.name === "tool_call") return `tool ${(p.tool_call || p).name}`;
      if (p.name === "state") return `state ${p.state}`;
      if (p.name === "session_started" && p.snapshot) return `live (${p.transport || "?"}) ${p.agent || ""}`;
      return p.name;
    case "error": return `error ${p.code}: ${p.message}`;
    default: return null;
  }
}

function onMessage(m) {
  const p0 = m.payload || {};
  if (m.type === "event" && p0.name === "relay_connected") {  // sent once the key was accepted
    $("relay-state").textContent = "Connected";
    return;
  }
  if (m.type === "error") $("relay-state").textContent = `Error ${p0.code}: ${p0.message}`;
  const sid = m.session_id;
  if (sid) {
    const entry = sessions.get(sid) || { agent: "", state: "", transport: "" };
    const p = m.payload || {};
    if (m.type === "event" && p.name === "session_ended") sessions.delete(sid);
    else {
      if (p.agent) entry.agent = p.agent;
      if (p.transport) entry.transport = p.transport;
      if (p.name === "state" || (p.snapshot && p.state)) entry.state = p.state;
      if (p.name === "handoff") entry.agent = p.to;
      sessions.set(sid, entry);
    }
    renderSessions();
  }
  if (m.type === "turn_metrics") { showTiming(sid, m.payload || {}); return; }
  const text = describe(m);
  if (text && m.type !== "audio_levels") {
    const li = document.createElement("li");
    li.dataset.sid = sid || ""; li.dataset.type = m.type;
    li.textContent = `${new Date((m.ts || Date.now() / 1000) * 1000).toLocaleTimeString()} ${followed ? "" : "[" + (sid || "").slice(0, 8) + "] "}${text}`;
    $("feed").append(li);
    while ($("feed").children.length > 500) $("feed").firstChild.remove();
    $("feed").scrollTop = $("feed").scrollHeight;
  }
}

/* A turn's figures follow its final response: its end of caller turn to first agent audio goes on
   that session's latest response line not yet timed (or a line of its own if that is gone). */
function showTiming(sid, p) {
  const ms = (p.latency_ms || {}).end_to_first_audio;
  const lines = [...$("feed").querySelectorAll('li[data-type="response"]:not([data-turn])')]
    .filter((li) => li.dataset.sid === (sid || ""));
  const li = lines[lines.length - 1];
  if (li) li.dataset.turn = p.turn_index;
  if (typeof ms !== "number") return;  // the greeting, or a stage that did not run
  const span = document.createElement("span");
  span.className = "timing";
  span.title = "end of the caller's turn to the agent's first audio";
  span.textContent = `${Math.round(ms)} ms`;
  if (li) { li.append(" · ", span); return; }
  const own = document.createElement("li");
  own.append(`${followed ? "" : "[" + (sid || "").slice(0, 8) + "] "}${p.agent || "agent"} turn ${p.turn_index}: `, span);
  $("feed").append(own);
}

function renderSessions() {
  const list = $("sessions");
  list.innerHTML = "";
  for (const [sid, info] of sessions) {
    const li = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = `Follow ${sid.slice(0, 12)}`;
    button.setAttribute("aria-label", `Follow session ${sid}`);
    button.addEventListener("click", () => open(sid));
    li.append(button, document.createTextNode(` ${info.transport || ""} ${info.agent || ""} ${info.state || ""}`));
    list.append(li);
  }
}

$("follow-all").addEventListener("click", () => open(""));
open("");
