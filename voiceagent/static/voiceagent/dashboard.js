/* Live dashboard: every server message of all sessions (or one) through /api/v1/browser/dashboard/relay.
   On connect the relay sends a session_started with snapshot: true per conversation already live. */
"use strict";

const $ = (id) => document.getElementById(id);
const sessions = new Map();  // session id -> {agent, state, transport, takenOverBy}
const PERSON_STORE = "voiceagent.person";
let relay = null;
let followed = "";
let mine = "";  // the session this person took over: the Say form speaks into it
let retryDelay = 1;  // seconds before the next reconnect after a lost relay (doubles up to RETRY_MAX_S)
let retryTimer = null;
const RETRY_MAX_S = 15;
// Closes worth retrying: the connection was lost (1006), the server went away or restarts (1001,
// 1012), was overloaded (1013) or failed (1011). A refusal (1008, 1009) is the client's to fix.
const RETRY_CODES = new Set([1001, 1006, 1011, 1012, 1013]);
const keys = keyPrompt(() => open(followed));

/* Follow one session (or all); a reconnect (again) keeps the feed shown so far. */
function open(sessionId, again = false) {
  clearTimeout(retryTimer);
  if (relay) { relay.replaced = true; relay.close(1000); }
  followed = sessionId || "";
  $("followed").textContent = followed || "all sessions";
  if (!again) $("feed").innerHTML = "";
  if (!followed) { sessions.clear(); renderSessions(); }  // the snapshot lists them again
  $("relay-state").textContent = "Connecting…";
  const ws = new WebSocket(wsUrl("/api/v1/browser/dashboard/relay", { session_id: followed }));
  relay = ws;
  ws.onclose = (e) => {
    if (ws.replaced) return;
    if (isAuthClose(e)) keys.show(e.reason);
    $("relay-state").textContent = `Disconnected. ${describeClose(e)}`;
    if (!RETRY_CODES.has(e.code)) return;
    // A dashboard watches for hours: a lost connection (a restarted worker, a load balancer's
    // idle cut, a busy server) reconnects by itself, waiting longer each time.
    $("relay-state").textContent += ` Reconnecting in ${retryDelay} s…`;
    retryTimer = setTimeout(() => open(followed, true), retryDelay * 1000);
    retryDelay = Math.min(retryDelay * 2, RETRY_MAX_S);
  };
  ws.onmessage = (e) => onMessage(JSON.parse(e.data));
}

function describe(m) {
  const p = m.payload || {};
  switch (m.type) {
    case "transcript": return `caller${p.final ? "" : " (…)"}: ${p.text}`;
    case "response":
      if (!p.final) return null;
      return p.by ? `${p.by} (person, ${p.agent}'s voice): ${p.text}` : `${p.agent}: ${p.text}`;
    case "event":
      if (p.name === "handoff") return `handoff ${p.from} → ${p.to} (${p.type})`;
      if (p.name === "tool_call") return `tool ${(p.tool_call || p).name}`;
      if (p.name === "state") return `state ${p.state}`;
      if (p.name === "takeover") return `taken over by ${p.by}`;
      if (p.name === "takeover_requested") return `asks for a person (${p.priority}): ${p.reason} · ${p.reference}`;
      if (p.name === "transfer_requested") return `agent escalated to a person: ${p.reason}`;
      if (p.name === "handback") return `handed back to the agent by ${p.by}`;
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
    retryDelay = 1;
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
      if (p.monitor) entry.monitor = true;  // an AudioHook monitor: people talk, no agent to take over
      if (p.name === "state" || (p.snapshot && p.state)) entry.state = p.state;
      if (p.name === "handoff") entry.agent = p.to;
      if (p.name === "takeover" || (p.snapshot && p.taken_over_by)) entry.takenOverBy = p.by || p.taken_over_by;
      if (p.name === "handback") entry.takenOverBy = "";
      if (p.name === "takeover_requested") entry.requested = true;
      if (p.name === "takeover") entry.requested = false;
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
    const label = ` ${info.transport || ""}${info.monitor ? " monitor" : ""} ${info.agent || ""} ${info.state || ""}`;
    if (info.monitor) {
      li.append(button, document.createTextNode(label));
      list.append(li);
      continue;
    }
    const control = document.createElement("button");
    control.type = "button";
    control.className = "control";
    control.textContent = info.takenOverBy ? "Hand back" : "Take over";
    control.setAttribute("aria-label", `${control.textContent} session ${sid}`);
    control.addEventListener("click", () => takeOver(sid, !info.takenOverBy));
    const who = info.takenOverBy ? ` · with ${info.takenOverBy}` : (info.requested ? " · asks for a person" : "");
    li.classList.toggle("requested", Boolean(info.requested && !info.takenOverBy));
    li.append(button, " ", control, document.createTextNode(label + who));
    list.append(li);
  }
  const current = sessions.get(mine);
  $("say-form").hidden = !(current && current.takenOverBy);
  $("say-session").textContent = mine.slice(0, 12);
}

/* Take the conversation over (or hand it back) as the person named in #person. */
async function takeOver(sid, take) {
  const by = person();
  try {
    await apiPost(`/api/v1/sessions/${encodeURIComponent(sid)}/${take ? "takeover" : "handback"}`, { by });
    $("control-state").textContent = take ? `You (${by}) have session ${sid.slice(0, 12)}; the agent is silent.` : `Handed back ${sid.slice(0, 12)} to the agent.`;
    mine = take ? sid : (mine === sid ? "" : mine);
    renderSessions();
  } catch (e) {
    if (e instanceof AuthRequired) keys.show(e.message);
    $("control-state").textContent = `Could not ${take ? "take over" : "hand back"}: ${e.message}`;
  }
}

function person() {
  const name = $("person").value.trim() || "operator";
  localStorage.setItem(PERSON_STORE, name);
  return name;
}

$("person").value = localStorage.getItem(PERSON_STORE) || "";
$("say-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const text = $("say-text").value.trim();
  if (!text || !mine) return;
  try {
    await apiPost(`/api/v1/sessions/${encodeURIComponent(mine)}/say`, { text, by: person() });
    $("say-text").value = "";
    $("control-state").textContent = "Said.";
  } catch (err) {
    if (err instanceof AuthRequired) keys.show(err.message);
    $("control-state").textContent = `Could not say it: ${err.message}`;
  }
});

$("follow-all").addEventListener("click", () => open(""));
open("");
