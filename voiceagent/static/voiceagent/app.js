/* The conversation page: one WebSocket to /api/v1/browser/conversation, microphone in, agent audio out. */
"use strict";

const $ = (id) => document.getElementById(id);
const state = { ws: null, live: false, mic: null, player: new PcmPlayer(),
                sessionId: localStorage.getItem("voiceagent.session") || "", agent: "", micOn: false,
                pending: [], pendingKeys: [] };  // typed while not connected: sent once the session has started
window.__voice = { get chunksPlayed() { return state.player.chunksPlayed; }, received: { audio: 0 }, state };

function line(list, cls, who, text) {
  const li = document.createElement("li");
  li.className = cls;
  if (who) { const span = document.createElement("span"); span.className = "who"; span.textContent = who; li.append(span); }
  li.append(document.createTextNode(text));
  list.append(li);
  list.scrollTop = list.scrollHeight;
  return li;
}

function showError(message) { $("error").textContent = message || ""; }
function notice(message) { $("notice").textContent = message || ""; }

const keys = keyPrompt(() => {
  showError(""); notice("");
  loadScenarios();
  if (state.ws) { state.ws.replaced = true; state.ws.close(1000, "new API key"); }
});

function connect() {
  const ws = new WebSocket(wsUrl("/api/v1/browser/conversation", { session_id: state.sessionId }));
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  $("state").textContent = "connecting";
  ws.onopen = () => {
    send("config", { scenario: $("scenario").value || undefined, mode: $("mode").value,
                     sample_rate: 16000, output_sample_rate: 24000 });
  };
  ws.onmessage = (e) => handle(JSON.parse(e.data));
  ws.onclose = (e) => {
    if (state.ws === ws) { state.ws = null; state.live = false; $("state").textContent = "disconnected"; }
    if (state.micOn) stopMic();
    if (ws.replaced) return;  // we closed it to reconnect with a new key
    if (isAuthClose(e)) keys.show(e.reason);
    showError(describeClose(e));
    if (state.pending.length) {  // never sent: give the words back to the user
      $("text").value = state.pending.join(" ");
      state.pending = [];
      notice("Not connected: your message was not sent.");
    }
    if (state.pendingKeys.length) {
      $("keypad-digits").value = state.pendingKeys.join("").replaceAll("#", "");
      state.pendingKeys = [];
      notice("Not connected: your keys were not sent.");
    }
  };
}

/* Typed text: sent at once when the session is live; otherwise said so, and sent after connecting. */
function sendText(text) {
  if (state.live && state.ws && state.ws.readyState === WebSocket.OPEN) { send("text", { text }); return; }
  if (keys.shown) {
    $("text").value = text;
    notice("Not connected: enter the API key above first; your message was not sent.");
    return;
  }
  state.pending.push(text);
  notice("Not connected: connecting… your message is sent once the session starts.");
  if (!state.ws) connect();
}

/* Keypad digits: one `dtmf` message, ended by "#" so the agent takes them as one entry at once. */
const KEYPAD_KEYS = /[^0-9*#ABCD]/g;
function sendKeys(digits) {
  if (!digits) return;
  const entry = digits + "#";
  $("keypad-sent").textContent = `Sent: ${entry}`;
  if (state.live && state.ws && state.ws.readyState === WebSocket.OPEN) { send("dtmf", { digits: entry }); return; }
  if (keys.shown) {
    $("keypad-digits").value = digits; $("keypad-sent").textContent = "";
    notice("Not connected: enter the API key above first; your keys were not sent.");
    return;
  }
  state.pendingKeys.push(entry);
  notice("Not connected: connecting… your keys are sent once the session starts.");
  if (!state.ws) connect();
}

function submitKeypad() {
  const field = $("keypad-digits");
  const digits = field.value.replace(KEYPAD_KEYS, "").replaceAll("#", "").slice(0, 31);
  field.value = "";
  state.player.ensure();
  sendKeys(digits);
}

function send(type, payload) {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ type, payload }));
}

let responseLine = null;
function handle(m) {
  const p = m.payload || {};
  switch (m.type) {
    case "audio":
      window.__voice.received.audio++;
      state.player.play(b64ToInt16(p.data), p.sample_rate);
      break;
    case "transcript":
      if (p.final) { $("interim").textContent = ""; line($("transcript"), "user", "You", p.text); responseLine = null; }
      else $("interim").textContent = p.text + " …";
      break;
    case "response": {
      const who = p.by ? `${p.by} (a person)` : p.agent;  // a colleague who took the call over
      if (!p.final) {
        if (!responseLine) responseLine = line($("transcript"), "agent", who, "");
        responseLine.lastChild.textContent += p.text;
      } else {
        if (responseLine) responseLine.lastChild.textContent = p.text;
        else line($("transcript"), "agent", who, p.text);
        responseLine = null;
      }
      setAgent(p.agent);
      break;
    }
    case "event": onEvent(p, m); break;
    case "audio_levels":
      $("meter-in").value = p.input; $("meter-out").value = p.output;
      break;
    case "error":
      showError(`Error ${p.code}: ${p.message}`);
      if (p.code === "start_failed") startFailed();
      break;
    case "turn_metrics": showTiming(p); break;
  }
}

/* A turn's figures arrive after its final response: the end of the caller's turn to the agent's
   first audio goes next to the agent's name on the latest agent line not yet timed. */
function showTiming(p) {
  const lines = $("transcript").querySelectorAll("li.agent:not([data-turn])");
  const li = lines[lines.length - 1];
  if (!li) return;
  li.dataset.turn = p.turn_index;
  const ms = (p.latency_ms || {}).end_to_first_audio;
  if (typeof ms !== "number") return;  // the greeting, or a stage that did not run
  const span = document.createElement("span");
  span.className = "timing";
  span.title = "end of your turn to the agent's first audio";
  span.textContent = `${Math.round(ms)} ms`;
  let who = li.querySelector(".who");
  if (!who) { who = document.createElement("span"); who.className = "who"; li.prepend(who); }
  who.append(" · ", span);
}

function setAgent(name) { if (name) { state.agent = name; $("agent").textContent = name; } }

function onEvent(p, m) {
  switch (p.name) {
    case "session_started":
      state.sessionId = m.session_id;
      localStorage.setItem("voiceagent.session", state.sessionId);
      $("session").textContent = state.sessionId;
      state.live = true;
      showError(""); notice("");
      if ($("state").textContent === "connecting") $("state").textContent = "connected";
      for (const text of state.pending.splice(0)) send("text", { text });
      for (const digits of state.pendingKeys.splice(0)) send("dtmf", { digits });
      break;
    case "session_ended":
      line($("activity"), "", "", `Session ended: ${p.reason || ""}`);
      break;
    case "state":
      $("state").textContent = p.state; setAgent(p.agent);
      break;
    case "barge_in":
      state.player.stop(); responseLine = null;
      line($("activity"), "", "", "You interrupted the agent");
      break;
    case "duck":
      state.player.duck(p.gain_db);
      break;
    case "takeover":
      line($("activity"), "takeover", "", `${p.by} (a person) has joined the conversation`);
      break;
    case "handback":
      line($("activity"), "takeover", "", `${p.by} handed you back to the agent`);
      break;
    case "handoff":
      line($("activity"), "handoff", "", `Handoff ${p.from} → ${p.to} (${p.type})`);
      setAgent(p.to);
      break;
    case "tool_call": {
      const call = p.tool_call || p;
      line($("activity"), "", "", `Tool ${call.name}(${JSON.stringify(call.args)}) in ${Math.round(call.duration_ms)} ms`);
      break;
    }
  }
}

async function startMic() {
  if (!state.ws) connect();
  state.player.ensure();  // a user gesture unlocks playback
  state.mic = new MicCapture((buffer) => {
    if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(buffer);
  }, 16000, 20, $("processing").checked);
  try { await state.mic.start(); }
  catch (e) { showError(`Microphone unavailable: ${e.message}`); state.mic = null; return; }
  state.micOn = true;
  send("control", { action: "start" });
  $("mic").textContent = "Stop microphone"; $("mic").setAttribute("aria-pressed", "true");
}

/* The conversation could not start (live mode without a realtime API, say): the microphone stops
   (the server no longer retries on its audio) and the page says so until the next start. */
function startFailed() {
  $("state").textContent = "not started";
  if (state.micOn) { stopMic(); notice("Microphone stopped: the conversation could not start."); }
}

async function stopMic() {
  state.micOn = false;
  if (state.mic) await state.mic.stop();
  state.mic = null;
  $("mic").textContent = "Start microphone"; $("mic").setAttribute("aria-pressed", "false");
}

function placeholder(select, text) {
  select.innerHTML = "";
  const option = document.createElement("option");
  option.value = ""; option.textContent = text;
  select.append(option);
}

async function loadScenarios() {
  const select = $("scenario");
  try {
    const body = await apiGet("/api/v1/scenarios");
    keys.hide();
    select.innerHTML = "";
    for (const s of body.scenarios) {
      const option = document.createElement("option");
      option.value = s.name; option.textContent = `${s.name} — ${s.description || s.start_agent}`.slice(0, 90);
      select.append(option);
    }
    const saved = localStorage.getItem("voiceagent.scenario");
    if (saved && [...select.options].some((o) => o.value === saved)) select.value = saved;
  } catch (e) {
    placeholder(select, e instanceof AuthRequired ? "API key needed" : "Could not load scenarios");
    if (e instanceof AuthRequired) keys.show(e.message);
    showError(`Could not load scenarios: ${e.message}`);
  }
}

$("mic").addEventListener("click", () => (state.micOn ? stopMic() : startMic()));
$("reset").addEventListener("click", () => {
  state.player.stop();
  $("transcript").innerHTML = ""; $("activity").innerHTML = ""; $("interim").textContent = "";
  if (state.ws) send("control", { action: "reset" });
});
$("scenario").addEventListener("change", () => {
  localStorage.setItem("voiceagent.scenario", $("scenario").value);
  send("config", { scenario: $("scenario").value });
});
$("mode").addEventListener("change", () => send("config", { mode: $("mode").value }));
$("text-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("text").value.trim();
  if (!text) return;
  state.player.ensure();
  $("text").value = "";
  sendText(text);
});
$("keypad").addEventListener("submit", (e) => { e.preventDefault(); submitKeypad(); });
$("keypad").querySelectorAll("button[data-key]").forEach((button) => button.addEventListener("click", () => {
  const key = button.dataset.key;
  if (key === "#") { submitKeypad(); return; }
  const field = $("keypad-digits");
  if (field.value.length < 31) field.value += key;
}));
$("keypad-digits").addEventListener("input", (e) => {  // typed: keep keypad keys only; "#" sends
  const field = e.target;
  const ended = field.value.includes("#");
  field.value = field.value.toUpperCase().replace(KEYPAD_KEYS, "").replaceAll("#", "");
  if (ended) submitKeypad();
});
loadScenarios();
