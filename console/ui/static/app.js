// app.js: the console's shell. It reads the token, asks the session
// endpoint who is serving, routes the hash (#/cluster, …) to a view, and
// polls the view every 2 s while the tab is visible. A failed poll shows
// the banner and keeps the last data.

import cluster from "./views/cluster.js";
import shards from "./views/shards.js";
import timeline from "./views/timeline.js";
import entities from "./views/entities.js";
import tasks from "./views/tasks.js";
import schedules from "./views/schedules.js";
import config from "./views/config.js";
import { clock } from "./dom.js";

const views = {
  cluster: ["Cluster", cluster], shards: ["Shards", shards], timeline: ["Timeline", timeline],
  entities: ["Entities", entities], tasks: ["Tasks", tasks], schedules: ["Schedules", schedules],
  config: ["Config", config],
};
const POLL_MS = 2000;
// TIMEOUT_MS bounds every request: a runner that stops answering must not
// leave the page waiting (the poll after it would never start).
const TIMEOUT_MS = 10000;
const TOKEN_KEY = "tenure.console.token";
const $ = (id) => document.getElementById(id);

// ---- token: sessionStorage only (the tab's lifetime), never a cookie.

function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}

function setToken(v) {
  try {
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lives until the page is left */ }
}

// takeFragmentToken moves a token in the fragment (tenure dev prints
// /ui/#token=…; #/tasks?token=… works too) into sessionStorage and out of
// the address bar and the history, keeping the route.
function takeFragmentToken() {
  const raw = location.hash.slice(1);
  const q = raw.indexOf("?");
  const [path, query] = q >= 0 ? [raw.slice(0, q), raw.slice(q + 1)] : raw.startsWith("/") ? [raw, ""] : ["", raw];
  const parts = query.split("&");
  const i = parts.findIndex((p) => p.startsWith("token="));
  if (i < 0) return;
  let v = parts[i].slice(6);
  try { v = decodeURIComponent(v); } catch { /* keep it as given */ }
  setToken(v);
  parts.splice(i, 1);
  const rest = parts.filter(Boolean).join("&");
  history.replaceState(null, "", location.pathname + location.search + "#" + (path || "/cluster") + (rest ? "?" + rest : ""));
}

// ---- API

// ApiError is a refused or failed request: status 0 when no answer came.
class ApiError extends Error {
  constructor(status, message, code, body) {
    super(message);
    this.status = status;
    this.code = code || "";
    this.body = body;
  }
}

// api makes one request to /ui/api/<path> (relative to the page, so the
// console works behind a path prefix) and returns the decoded JSON. body:
// a string is sent as is (an operation's input), anything else as JSON.
async function api(method, path, body) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  const headers = { Accept: "application/json" };
  const tok = token();
  if (tok) headers.Authorization = "Bearer " + tok;
  const init = { method, headers, signal: ctl.signal, cache: "no-store", credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const what = `${method} /ui/api/${path}`;
  let res, text;
  try {
    res = await fetch("api/" + path, init);
    text = await res.text();
  } catch (e) {
    throw new ApiError(0, ctl.signal.aborted ? `${what}: no answer within ${TIMEOUT_MS / 1000} s` : `${what}: ${e.message}`);
  } finally {
    clearTimeout(timer);
  }
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* an error page in text */ }
  if (!res.ok) {
    const msg = (data && typeof data.error === "string" && data.error) || text.trim() || res.statusText;
    if (res.status === 401 || res.status === 403) showAuth(res.status === 401 && tok ? `The saved token was refused: ${msg}` : msg);
    throw new ApiError(res.status, msg, data && data.code, data);
  }
  if (data === null && text) throw new ApiError(res.status, `${what}: the answer is not JSON`);
  return data;
}

// ---- auth box and session

let session = null;

function showAuth(msg) {
  $("auth").hidden = false;
  $("auth-toggle").setAttribute("aria-expanded", "true");
  if ($("auth-msg").textContent !== msg) $("auth-msg").textContent = msg || "";
}

function hideAuth() {
  $("auth").hidden = true;
  $("auth-toggle").setAttribute("aria-expanded", "false");
  $("auth-msg").textContent = "";
}

async function loadSession() {
  try {
    session = await api("GET", "session");
  } catch (e) {
    $("who").textContent = "session: " + e.message;
    return;
  }
  const s = session;
  $("who").textContent = `cluster ${s.cluster} · served by ${s.runner_id} · ${s.version}`;
  let state;
  if (!s.auth_configured) state = "no admin credential configured: user data and actions are refused";
  else if (s.authorized) state = "token accepted";
  else state = s.protect_reads ? "token needed for every view" : "token needed for user data and actions";
  $("auth-state").textContent = state;
  if (s.authorized) hideAuth();
  else if (s.auth_configured && (token() || s.protect_reads)) {
    showAuth(token() ? "The saved token was refused by this runner." : "This runner protects its views: give the admin token.");
  }
}

function initAuth() {
  $("auth").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = $("auth-token");
    setToken(input.value.trim());
    input.value = "";
    await loadSession();
    if (session && session.authorized) $("main").focus();
    refresh();
  });
  $("auth-forget").addEventListener("click", async () => {
    setToken("");
    $("auth-msg").textContent = "Token forgotten.";
    await loadSession();
    refresh();
  });
  $("auth-toggle").addEventListener("click", () => {
    if ($("auth").hidden) {
      showAuth("");
      $("auth-token").focus();
    } else hideAuth();
  });
}

// ---- confirmation: a modal <dialog> (focus kept inside, Escape cancels).

function confirmAction(title, text, ok) {
  const d = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = ok || "Confirm";
  d.returnValue = "";
  d.showModal();
  return new Promise((resolve) => d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true }));
}

// ---- polling

let view = null; // the mounted view: {el, refresh()}
let gen = 0; // bumped by every route change: answers for an older view are dropped
let timer = 0;
let inflight = false;
let again = false;
let lastGood = null;

function schedule() {
  clearTimeout(timer);
  if (document.visibilityState === "visible") timer = setTimeout(refresh, POLL_MS);
}

// refresh polls the current view now (or as soon as the poll in flight ends).
async function refresh() {
  clearTimeout(timer);
  if (inflight) { again = true; return; }
  inflight = true;
  again = false;
  const g = gen;
  const v = view;
  try {
    const polled = await v.refresh();
    if (g === gen && polled !== false) {
      banner(null);
      lastGood = new Date();
      stamp(lastGood);
    }
  } catch (e) {
    if (g === gen) banner(e);
  } finally {
    inflight = false;
    if (again || g !== gen) refresh();
    else schedule();
  }
}

// stamp shows the time of the last good poll (null: none yet).
function stamp(d) {
  const t = $("last-updated");
  t.textContent = d ? clock(d) : "never";
  if (d) t.dateTime = t.title = d.toISOString();
  else t.removeAttribute("datetime");
}

function banner(e) {
  const b = $("banner");
  if (!e) {
    b.hidden = true;
    b.textContent = "";
    return;
  }
  let text = `Refresh failed: ${e.message}`;
  text += lastGood ? ` — showing the data of ${clock(lastGood)}.` : "";
  if (b.textContent !== text) b.textContent = text;
  b.hidden = false;
}

document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") refresh();
  else clearTimeout(timer);
});

// ---- routing

function route() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [name, query = ""] = raw.split("?");
  if (!Object.hasOwn(views, name)) {
    history.replaceState(null, "", location.pathname + location.search + "#/cluster");
    return route();
  }
  const [title, make] = views[name];
  gen++;
  clearTimeout(timer);
  lastGood = null;
  stamp(null);
  banner(null);
  for (const a of document.querySelectorAll("nav.views a")) {
    if (a.getAttribute("href") === "#/" + name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${title} · Tenure console`;
  const ctx = {
    api, refresh, confirm: confirmAction, params: new URLSearchParams(query),
    session: () => session,
    // setQuery records a view's inputs in the address (a link to share)
    // without a hashchange, so the view is not mounted again.
    setQuery: (q) => history.replaceState(null, "", `#/${name}${q ? "?" + q : ""}`),
  };
  view = make(ctx);
  $("main").replaceChildren(view.el);
  refresh();
}

function start() {
  takeFragmentToken();
  initAuth();
  $("skip").addEventListener("click", (e) => {
    e.preventDefault(); // the hash is the route
    $("main").focus();
  });
  window.addEventListener("hashchange", () => {
    takeFragmentToken();
    route();
  });
  loadSession();
  route();
}

start();
