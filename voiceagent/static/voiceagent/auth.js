/* The API key the pages send, and the prompt that asks for it. Once a server has an API key (API_KEYS,
   or production) the REST API answers 401 and the WebSockets close with 1008 "unauthorized: ...";
   the pages then show #key-form, remember the key in localStorage and send it as
   "Authorization: Bearer" on fetches and "?api_key=" on WebSockets (browsers cannot set headers on
   a WebSocket; calls/wsauth.py accepts both). Shared by both pages; no build step. */
"use strict";

const API_KEY_STORE = "voiceagent.apikey";

function apiKey() { return localStorage.getItem(API_KEY_STORE) || ""; }

function setApiKey(value) {
  if (value) localStorage.setItem(API_KEY_STORE, value);
  else localStorage.removeItem(API_KEY_STORE);
}

/* The server refused the request for want of a (valid) API key. */
class AuthRequired extends Error {}

function wsUrl(path, params = {}) {
  const url = new URL(path, location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  for (const [k, v] of Object.entries(params)) if (v) url.searchParams.set(k, v);
  if (apiKey()) url.searchParams.set("api_key", apiKey());
  return url.toString();
}

async function apiGet(path) {
  const headers = apiKey() ? { Authorization: "Bearer " + apiKey() } : {};
  const response = await fetch(path, { headers });
  let body = null;
  try { body = await response.json(); } catch (e) { /* not JSON: the status says enough */ }
  const detail = (body && body.detail) || response.statusText;
  if (response.status === 401) throw new AuthRequired(detail || "an API key is required");
  if (!response.ok) throw new Error(`${response.status} ${detail}`);
  return body;
}

/* POST a JSON body; the answer's JSON, or an Error saying the status and the server's detail. */
async function apiPost(path, body) {
  const headers = { "Content-Type": "application/json" };
  if (apiKey()) headers.Authorization = "Bearer " + apiKey();
  const response = await fetch(path, { method: "POST", headers, body: JSON.stringify(body || {}) });
  let answer = null;
  try { answer = await response.json(); } catch (e) { /* not JSON: the status says enough */ }
  const detail = (answer && answer.detail) || response.statusText;
  if (response.status === 401) throw new AuthRequired(detail || "an API key is required");
  if (!response.ok) throw new Error(`${response.status} ${detail}`);
  return answer;
}

/* A WebSocket close that means "send an API key" (1008 with an "unauthorized" reason). */
function isAuthClose(event) { return /unauthori[sz]ed/i.test(event.reason || ""); }

/* "Closed (code): reason", for every close the user should hear about. */
function describeClose(event) {
  if (event.code === 1006) return "Connection lost (1006): the server could not be reached or went away";
  return `Connection closed (${event.code})${event.reason ? ": " + event.reason : ""}`;
}

/* Wires #key-form (#key-message, #apikey, #key-button to open it by hand); onKey runs after a key is saved. */
function keyPrompt(onKey) {
  const form = document.getElementById("key-form");
  const input = document.getElementById("apikey");
  const message = document.getElementById("key-message");
  input.value = apiKey();
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    setApiKey(input.value.trim());
    form.hidden = true;
    onKey();
  });
  const toggle = document.getElementById("key-button");
  if (toggle) toggle.addEventListener("click", () => { form.hidden = !form.hidden; if (!form.hidden) input.focus(); });
  return {
    show(detail) {
      const saved = apiKey() ? " The saved key was refused." : "";
      const said = String(detail || "").replace(/\.?$/, ".");
      message.textContent = `This server needs an API key. The server said: ${said}${saved} Enter it to continue.`;
      form.hidden = false;
      input.focus();
    },
    hide() { form.hidden = true; },
    get shown() { return !form.hidden; },
  };
}
