/* Live dashboard: every server message of all sessions (or one) through /api/v1/browser/dashboard/relay. */
"use strict";

const $ = (id) => document.getElementById(id);
const sessions = new Map();  // session id -> {agent, state, last}
let relay = null;
let followed = "";

function key() { return localStorage.getItem("voiceagent.apikey") || ""; }

function open(sessionId) {
  if (relay) relay.close(1000);
  followed = sessionId || "";
  $("followed").textContent = followed || "all sessions";
  $("feed").innerHTML = "";
  const url = new URL("/api/v1/browser/dashboard/relay", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if (followed) url.searchParams.set("session_id", followed);
  if (key()) url.searchParams.set("api_key", key());
  relay = new WebSocket(url);
  relay.onopen = () => { $("relay-state").textContent = "Connected"; };
  relay.onclose = (e) => { $("relay-state").textContent = `Disconnected (${e.code}) ${e.reason || ""}`; };
  relay.onmessage = (e) => onMessage(JSON.parse(e.data));
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
      return p.name;
    case "error": return `error ${p.code}: ${p.message}`;
    default: return null;
  }
}

function onMessage(m) {
  const sid = m.session_id;
  if (sid) {
    const entry = sessions.get(sid) || { agent: "", state: "" };
    const p = m.payload || {};
    if (m.type === "event" && p.name === "session_ended") sessions.delete(sid);
    else {
      if (p.agent) entry.agent = p.agent;
      if (p.name === "state") entry.state = p.state;
      if (p.name === "handoff") entry.agent = p.to;
      sessions.set(sid, entry);
    }
    renderSessions();
  }
  const text = describe(m);
  if (text && m.type !== "audio_levels") {
    const li = document.createElement("li");
    li.textContent = `${new Date((m.ts || Date.now() / 1000) * 1000).toLocaleTimeString()} ${followed ? "" : "[" + (sid || "").slice(0, 8) + "] "}${text}`;
    $("feed").append(li);
    while ($("feed").children.length > 500) $("feed").firstChild.remove();
    $("feed").scrollTop = $("feed").scrollHeight;
  }
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
    li.append(button, document.createTextNode(` ${info.agent || ""} ${info.state || ""}`));
    list.append(li);
  }
}

$("apikey").value = key();
$("apikey").addEventListener("change", () => { localStorage.setItem("voiceagent.apikey", $("apikey").value); open(followed); });
$("follow-all").addEventListener("click", () => open(""));
open("");
