// hookbridge's dashboard: reads /api/v1/ of the listener that serves it, every few seconds.
// The API key is asked for once and kept in this tab's sessionStorage; each request sends it as
// `Authorization: Bearer`. Everything shown is set as text (no HTML from the bridge's data).
"use strict";

const API = "/api/v1";
const REFRESH_MS = 5000;
// The tables show one page each: the dashboard asks for what it shows, never a whole fleet.
const SHOWN_ROWS = "100";
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let chosen = null; // the client whose session is shown
let retainedFilter = "#";
let timer = null;

class Unauthorized extends Error {}

async function api(method, path, query, body) {
  const url = API + path + (query ? "?" + new URLSearchParams(query) : "");
  // X-Hookbridge: without a key, the API makes a change only for a request that carries it
  // (a header no other web page can send here without the bridge agreeing, which it never does)
  const headers = { "X-Hookbridge": "dashboard" };
  const key = sessionStorage.getItem("hookbridge-key");
  if (key) headers.Authorization = "Bearer " + key;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) { headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  const answer = await fetch(url, init);
  if (answer.status === 401) throw new Unauthorized("a valid API key is needed");
  const answered = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const error = new Error(answered.error || answer.statusText);
    error.status = answer.status;
    throw error;
  }
  return answered;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fill(tbody, rows, cells) {
  tbody.replaceChildren(...rows.map((row) => {
    const tr = el("tr");
    for (const cell of cells(row)) tr.append(cell instanceof Node ? cell : el("td", cell ?? "-"));
    return tr;
  }));
}

function duration(seconds) {
  const s = Math.floor(seconds), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

function number(value) {
  if (value === null || value === undefined) return "-";
  return value >= 100 || Number.isInteger(value) ? Math.round(value).toLocaleString("en") : value.toFixed(1);
}

// -- charts: one SVG polyline per series over the last hour -----------------------------

function chart(svg, samples, series, windowSeconds, interval) {
  const width = 600, height = 180, top = 8, bottom = 18, left = 0;
  const now = samples.length ? samples[samples.length - 1].t : Date.now() / 1000;
  // the last hour; while the bridge has run for less, the time it has (at least 30 samples' worth)
  const span = Math.min(windowSeconds, Math.max(30 * interval, samples.length ? now - samples[0].t : 0));
  const start = now - span;
  let max = 0;
  for (const s of samples) for (const name of series) max = Math.max(max, s[name] ?? 0);
  max = max > 0 ? niceCeiling(max) : 1;
  const x = (t) => left + (t - start) / span * (width - left);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const parts = [];
  for (let i = 0; i <= 4; i++) {
    const value = max * i / 4;
    const line = document.createElementNS(SVG, "line");
    line.setAttribute("class", "grid");
    line.setAttribute("x1", 0); line.setAttribute("x2", width);
    line.setAttribute("y1", y(value)); line.setAttribute("y2", y(value));
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("class", "axis");
    label.setAttribute("x", 4); label.setAttribute("y", Math.max(y(value) - 2, 10));
    label.textContent = number(value);
    parts.push(line, label);
  }
  const ago = (seconds) => seconds >= 120 ? `-${Math.round(seconds / 60)} min` : `-${Math.round(seconds)} s`;
  for (const [i, text] of [ago(span), ago(span / 2), "now"].entries()) {
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("class", "axis");
    label.setAttribute("x", [0, width / 2, width - 24][i]);
    label.setAttribute("y", height - 3);
    label.textContent = text;
    parts.push(label);
  }
  for (const name of series) {
    const points = samples.filter((s) => s[name] !== null && s[name] !== undefined && s.t >= start)
      .map((s) => `${x(s.t).toFixed(1)},${y(s[name]).toFixed(1)}`);
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", name);
    line.setAttribute("points", points.join(" "));
    line.dataset.points = String(points.length);
    parts.push(line);
  }
  svg.replaceChildren(...parts);
}

function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

// -- the sections ----------------------------------------------------------------

async function showStatus() {
  const status = await api("GET", "/status");
  const broker = status.broker || {};
  const spool = status.spool || {};
  const fields = [["version", status.version], ["uptime", duration(status.uptime)],
    ["broker", `${broker.mode ?? "-"} ${broker.up ? "up" : "down"}`],
    ["spool", `${number(spool.bytes ?? 0)} bytes${spool.near_full ? " (near full)" : ""}`],
    ["ready", status.ready ? "yes" : "no"]];
  $("status").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", k), el("dd", v ?? "-")]));
}

async function showStats() {
  const stats = await api("GET", "/stats");
  const samples = stats.samples;
  chart($("chart-connections"), samples, ["connections"], stats.window, stats.interval);
  chart($("chart-messages"), samples, ["received", "sent"], stats.window, stats.interval);
  const last = samples[samples.length - 1] || {};
  $("now-connections").textContent = number(last.connections);
  $("now-messages").textContent = last.received === null || last.received === undefined
    ? number(last.events) + " events/s" : `${number(last.received)} in, ${number(last.sent)} out`;
}

async function every(path, query) {
  let items = [], cursor = null;
  do {
    const page = await api("GET", path, { ...query, limit: "1000", ...(cursor ? { cursor } : {}) });
    items = items.concat(page.data);
    cursor = page.next;
  } while (cursor && items.length < 10000);
  return items;
}

async function showRules() {
  const rules = await every("/rules", {});
  fill($("rules").tBodies[0], rules, (r) => [r.id, r.pool, r.matched ?? 0, r.succeeded ?? 0, r.failed ?? 0,
    r.retried ?? 0, r.spooled ?? 0, r.dropped ?? 0, r.deadlettered ?? 0]);
}

async function showPools() {
  const pools = await every("/pools", {});
  fill($("pools").tBodies[0], pools, (p) => [p.id, el("td", p.up ? "up" : "down", p.up ? "up" : "down"),
    p.queue ?? "-", p.spooled ?? "-", p.spool_bytes ?? 0, p.spool_error || p.error || "-"]);
}

async function showClients() {
  let page;
  try {
    page = await api("GET", "/clients", { prefix: $("client-search").value, limit: SHOWN_ROWS });
  } catch (error) {
    if (error.status === 409) { $("broker-only").hidden = true; return; } // not the embedded broker
    throw error;
  }
  $("broker-only").hidden = false;
  $("clients-more").hidden = !page.next;
  $("client-count").textContent = `(${page.data.length}${page.next ? "+" : ""})`;
  const tbody = $("clients").tBodies[0];
  fill(tbody, page.data, (c) => {
    const kick = el("button", "kick", "kick");
    kick.disabled = !c.connected;
    kick.addEventListener("click", (event) => { event.stopPropagation(); kickClient(kick, c.clientid); });
    const action = el("td"); action.append(kick);
    return [c.clientid, c.username, c.connected ? "yes" : "no", c.peername, c.proto_ver, c.subscriptions, action];
  });
  [...tbody.rows].forEach((tr, i) => {
    const id = page.data[i].clientid;
    tr.dataset.clientid = id;
    tr.classList.toggle("chosen", id === chosen);
    tr.addEventListener("click", () => { chosen = id; showSession().catch(report); showClients().catch(report); });
  });
}

async function kickClient(button, clientid) {
  if (!button.classList.contains("armed")) { // first click arms, the second kicks
    button.classList.add("armed");
    button.textContent = "confirm kick";
    setTimeout(() => { button.classList.remove("armed"); button.textContent = "kick"; }, 4000);
    return;
  }
  button.disabled = true;
  try {
    await api("DELETE", "/clients/" + encodeURIComponent(clientid));
  } catch (error) { report(error); return; } // the refusal stays shown until the next refresh
  await refresh();
}

async function showSession() {
  if (chosen === null) { $("session").hidden = true; return; }
  let session;
  try {
    session = await api("GET", "/sessions/" + encodeURIComponent(chosen));
  } catch (error) {
    if (error.status === 404) { chosen = null; $("session").hidden = true; return; }
    throw error;
  }
  $("session").hidden = false;
  $("session-id").textContent = session.clientid;
  const fields = [["connected", session.connected ? "yes" : "no"], ["user", session.username ?? "-"],
    ["peer", session.peername ?? "-"], ["protocol", session.proto_ver], ["clean", session.clean ? "yes" : "no"],
    ["expiry", session.expiry], ["durable", session.durable ? "yes" : "no"],
    ["queue", `${session.queue.messages} messages, ${session.queue.bytes} bytes`],
    ["in flight", session.inflight], ["dropped", session.dropped]];
  if (session.connected) {
    fields.push(["since", when(session.connected_at)], ["keepalive", session.keepalive],
      ["messages in / out", `${session.messages_in} / ${session.messages_out}`],
      ["bytes in / out", `${session.bytes_in} / ${session.bytes_out}`]);
  }
  fields.push(["will topic", session.will_topic ?? "-"]);
  $("session-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
  fill($("session-subs").tBodies[0], session.subscriptions, (s) => [s.filter, s.qos]);
  const queued = await api("GET", "/sessions/" + encodeURIComponent(chosen) + "/queue", { limit: "50" });
  $("session-queue-count").textContent = `(${session.queue.messages}${queued.next ? ", the first 50 shown" : ""})`;
  fill($("session-queue").tBodies[0], queued.data, (m) => [m.msgid, m.topic, m.qos, m.bytes, m.from_clientid,
    el("td", m.payload ?? "(binary)", "payload")]);
  $("session-remove").disabled = session.connected;
}

// -- bans: the list with a lift button each, and the form that adds one ------------------

function when(seconds) {
  return seconds === null || seconds === undefined ? "ever" : new Date(seconds * 1000).toISOString().replace(".000", "");
}

async function showBans() {
  const bans = await every("/bans", {});
  $("ban-count").textContent = `(${bans.length})`;
  const tbody = $("bans").tBodies[0];
  fill(tbody, bans, (b) => {
    const lift = el("button", "lift", "lift");
    lift.addEventListener("click", () => liftBan(lift, b));
    const action = el("td"); action.append(lift);
    return [b.as, b.who, when(b.until), b.by, b.reason, action];
  });
  [...tbody.rows].forEach((tr, i) => { tr.dataset.ban = bans[i].as + "/" + bans[i].who; });
}

async function addBan() {
  const body = { as: $("ban-as").value, who: $("ban-who").value.trim(), reason: $("ban-reason").value };
  const minutes = Number($("ban-minutes").value);
  if (minutes > 0) body.duration = minutes * 60;
  try {
    await api("POST", "/bans", null, body);
    $("ban-who").value = ""; $("ban-reason").value = ""; $("ban-minutes").value = "";
  } catch (error) { report(error); return; } // the refusal stays shown until the next refresh
  await refresh();
}

async function liftBan(button, ban) {
  button.disabled = true;
  try {
    await api("DELETE", "/bans/" + encodeURIComponent(ban.as) + "/" + ban.who.split("/").map(encodeURIComponent).join("/"));
  } catch (error) { report(error); return; } // the refusal stays shown until the next refresh
  await refresh();
}

// the session shown: purge its queue, or remove it (offline only); the first click arms, the second acts
async function sessionAction(button, label, method, part) {
  if (!button.classList.contains("armed")) {
    button.classList.add("armed");
    button.textContent = "confirm " + label;
    setTimeout(() => { button.classList.remove("armed"); button.textContent = label; }, 4000);
    return;
  }
  button.classList.remove("armed");
  button.textContent = label;
  try {
    await api(method, "/sessions/" + encodeURIComponent(chosen) + part);
  } catch (error) { report(error); return; } // the refusal stays shown until the next refresh
  await refresh();
}

// API keys and their last use: an admin key sees them; for a read key the section stays hidden
async function showKeys() {
  let keys;
  try {
    keys = await every("/keys", {});
  } catch (error) {
    if (error.status === 403) { $("keys-section").hidden = true; return; }
    throw error;
  }
  $("keys-section").hidden = false;
  fill($("keys").tBodies[0], keys, (k) => [k.name, k.scope, k.last_used ? when(k.last_used) : "never", k.last_from]);
}

async function showRetained() {
  const page = await api("GET", "/retained", { filter: retainedFilter, limit: SHOWN_ROWS });
  fill($("retained").tBodies[0], page.data, (r) => [r.topic, r.qos, r.bytes,
    el("td", r.payload ?? "(binary)", "payload")]);
}

function report(error) {
  if (error instanceof Unauthorized) { askKey(sessionStorage.getItem("hookbridge-key") ? "the key was refused" : ""); return; }
  $("error").hidden = false;
  $("error").textContent = String(error.message || error);
}

async function refresh() {
  clearTimeout(timer);
  try {
    await showStatus();
    await Promise.all([showStats(), showRules(), showPools(), showKeys(), showClients().then(async () => {
      if (!$("broker-only").hidden) await Promise.all([showSession(), showBans(), showRetained()]);
    })]);
    $("error").hidden = true;
    $("main").hidden = false;
    $("login").hidden = true;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
    document.body.dataset.loaded = "yes";
  } catch (error) {
    report(error);
    if (error instanceof Unauthorized) return; // no refresh until a key is given
  }
  // A tab in the background asks nothing: it refreshes when it is shown again (visibilitychange).
  if (!document.hidden) timer = setTimeout(refresh, REFRESH_MS);
}

function askKey(problem) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = problem;
  $("key").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("hookbridge-key", $("key").value.trim());
    $("key").value = "";
    refresh();
  });
  $("client-search").addEventListener("input", () => showClients().catch(report));
  $("ban-form").addEventListener("submit", (event) => { event.preventDefault(); addBan(); });
  $("session-purge").addEventListener("click", () => sessionAction($("session-purge"), "purge queue", "DELETE", "/queue"));
  $("session-remove").addEventListener("click", () => sessionAction($("session-remove"), "remove session", "DELETE", ""));
  $("retained-form").addEventListener("submit", (event) => {
    event.preventDefault();
    retainedFilter = $("retained-filter").value || "#";
    showRetained().catch(report);
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden && $("login").hidden) refresh(); });
  refresh();
});
