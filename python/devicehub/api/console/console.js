// devicehub operator console: a client of the documented API only (REST + the key's WebSocket channel).
"use strict";

const state = { key: null, ws: null, devices: [], device: null, eventTimes: [], reconnect: null, asyncIds: {} };
const $ = (id) => document.getElementById(id);

function takeKeyFromFragment() {
  // `/#key=…`: the fragment never reaches the server; keep the key in this tab only and drop it from the URL
  const match = location.hash.match(/^#key=([^&]+)/);
  if (match) {
    sessionStorage.setItem("devicehub-key", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + "#devices");
  }
  state.key = sessionStorage.getItem("devicehub-key");
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + state.key } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    logout("the key was refused (401)");
    throw new Error("unauthorized");
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
  return { status: response.status, data };
}

function b64decode(value) {
  try { return new TextDecoder().decode(Uint8Array.from(atob(value), (c) => c.charCodeAt(0))); }
  catch (e) { return value; }
}
function b64encode(text) {
  return btoa(String.fromCharCode(...new TextEncoder().encode(text)));
}
function td(text, cls) {
  const cell = document.createElement("td");
  cell.textContent = text == null ? "" : String(text);
  if (cls) cell.className = cls;
  return cell;
}

function show(view) {
  for (const id of ["login-view", "devices-view", "device-view", "channel-view"]) $(id).hidden = id !== view;
  $("nav").hidden = view === "login-view";
}

function logout(reason) {
  sessionStorage.removeItem("devicehub-key");
  state.key = null;
  if (state.ws) { state.ws.onclose = null; state.ws.close(); state.ws = null; }
  $("login-error").textContent = reason || "";
  show("login-view");
}

// ---- devices ------------------------------------------------------------------------------------
async function loadDevices() {
  const stateFilter = $("device-state").value;
  let path = "/v3/devices?limit=1000";
  if (stateFilter) path += "&filter=" + encodeURIComponent("state=" + stateFilter);
  const { status, data } = await api("GET", path);
  if (status !== 200) return;
  state.devices = data.data;
  renderDevices();
}

function renderDevices() {
  const needle = $("device-search").value.trim().toLowerCase();
  const body = $("device-table").tBodies[0];
  body.replaceChildren();
  const shown = state.devices.filter((d) =>
    !needle || d.endpoint_name.toLowerCase().includes(needle) || (d.endpoint_type || "").toLowerCase().includes(needle));
  for (const d of shown) {
    const row = document.createElement("tr");
    row.className = "clickable";
    row.dataset.deviceId = d.id;
    row.append(td(d.endpoint_name, "endpoint-name"), td(d.endpoint_type), td(d.state, "state"),
      td(d.updated_at), td(d.id, "muted"));
    row.addEventListener("click", () => { location.hash = "#device/" + d.id; });
    body.append(row);
  }
  $("device-count").textContent = `${shown.length} of ${state.devices.length}`;
}

// ---- one device ---------------------------------------------------------------------------------
async function loadDevice(id) {
  const [device, resources, echo] = await Promise.all([
    api("GET", "/v3/devices/" + encodeURIComponent(id)),
    api("GET", "/v2/endpoints/" + encodeURIComponent(id)),
    api("GET", "/v3/devices/" + encodeURIComponent(id) + "/echo"),
  ]);
  if (device.status !== 200) { $("device-title").textContent = id + " (not found)"; return; }
  state.device = device.data;
  $("device-title").textContent = device.data.endpoint_name;
  $("device-meta").textContent =
    `${device.data.id} · ${device.data.endpoint_type} · ${device.data.state} · last seen ${device.data.updated_at}`;
  const echoed = {};
  for (const r of (echo.status === 200 ? echo.data.resources : [])) echoed[r.resource_path] = r;
  const body = $("resource-table").tBodies[0];
  body.replaceChildren();
  for (const resource of (resources.status === 200 ? resources.data : [])) {
    const e = echoed[resource.uri] || {};
    const row = document.createElement("tr");
    row.dataset.path = resource.uri;
    const reported = e.reported ? b64decode(e.reported.value) : "";
    row.append(td(resource.uri), td(reported, "reported"), td(e.reported ? e.reported.reported_at : "", "reported-at"),
      td(e.desired ? b64decode(e.desired.value) : "", "desired"), td(e.desired ? e.desired.status : "", "desired-status"));
    const actions = td("", "actions");
    for (const [label, run] of [["read", readPath], ["write", writePath], ["execute", executePath],
                                ["observe", observePath]]) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label;
      button.dataset.action = label;
      button.addEventListener("click", () => run(resource.uri));
      actions.append(button);
    }
    row.append(actions);
    body.append(row);
  }
}

function logRequest(text) {
  const item = document.createElement("li");
  item.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $("request-log").prepend(item);
  return item;
}

async function deviceRequest(label, body) {
  const asyncId = "console-" + Math.random().toString(16).slice(2, 10);
  state.asyncIds[asyncId] = { label, item: logRequest(`${label}: sent (${asyncId})`) };
  const { status, data } = await api("POST",
    `/v2/device-requests/${encodeURIComponent(state.device.id)}?async-id=${asyncId}`, body);
  if (status !== 202) state.asyncIds[asyncId].item.textContent += ` refused ${status} ${JSON.stringify(data)}`;
}
function readPath(path) { return deviceRequest("read " + path, { method: "GET", uri: path }); }
function executePath(path) { return deviceRequest("execute " + path, { method: "POST", uri: path }); }
function writePath(path) {
  const value = prompt("Value to write to " + path);
  if (value !== null) return deviceRequest("write " + path, { method: "PUT", uri: path, "payload-b64": b64encode(value) });
}
async function observePath(path) {
  const { status } = await api("PUT", `/v2/subscriptions/${encodeURIComponent(state.device.id)}${path}`);
  logRequest(`observe ${path}: ${status}`);
}

function setCell(path, deviceId, value, when) {
  if (!state.device || state.device.id !== deviceId) return;
  const row = document.querySelector(`#resource-table tr[data-path="${CSS.escape(path)}"]`);
  if (!row) return;
  row.querySelector(".reported").textContent = value;
  row.querySelector(".reported-at").textContent = when;
  row.classList.remove("flash");
  void row.offsetWidth;
  row.classList.add("flash");
}

// ---- the WebSocket channel ----------------------------------------------------------------------
async function connect() {
  const opened = await api("PUT", "/v2/notification/websocket", {});
  if (opened.status !== 200 && opened.status !== 201) return;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/v2/notification/websocket-connect`, ["wss", "pelion_" + state.key]);
  state.ws = ws;
  ws.onopen = () => { $("live-state").textContent = "live"; $("live-state").classList.add("live"); };
  ws.onclose = () => {
    $("live-state").textContent = "offline";
    $("live-state").classList.remove("live");
    state.ws = null;
    if (state.key) state.reconnect = setTimeout(connect, 3000);
  };
  ws.onmessage = (message) => onEvents(JSON.parse(message.data));
}

function onEvents(events) {
  const now = Date.now();
  const when = new Date().toISOString();
  for (const n of events.notifications || []) {
    state.eventTimes.push(now);
    setCell(n.path, n.ep, b64decode(n.payload || ""), when);
  }
  for (const r of events["async-responses"] || []) {
    state.eventTimes.push(now);
    const pending = state.asyncIds[r.id];
    if (pending) {
      const value = r.payload ? b64decode(r.payload) : "";
      pending.item.textContent += ` → ${r.status}${value ? " " + value : ""}${r.error ? " " + r.error : ""}`;
      pending.item.classList.add("answered");
      if (pending.label.startsWith("read ") && r.status === 200 && state.device)
        setCell(pending.label.slice(5), state.device.id, value, when);
      delete state.asyncIds[r.id];
    }
  }
  for (const kind of ["registrations", "reg-updates", "de-registrations", "registrations-expired"]) {
    for (const _ of events[kind] || []) state.eventTimes.push(now);
    if ((events[kind] || []).length && !$("devices-view").hidden) loadDevices();
  }
}

function drawRate() {
  const canvas = $("rate-graph");
  const ctx = canvas.getContext("2d");
  const now = Date.now();
  state.eventTimes = state.eventTimes.filter((t) => now - t < 60000);
  const buckets = new Array(60).fill(0);
  for (const t of state.eventTimes) buckets[59 - Math.floor((now - t) / 1000)] += 1;
  const top = Math.max(1, ...buckets);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.fillStyle = "#457b9d";
  const w = canvas.width / 60;
  buckets.forEach((n, i) => { const h = (n / top) * (canvas.height - 16); ctx.fillRect(i * w, canvas.height - h, w - 1, h); });
  ctx.fillStyle = "#1d232a";
  ctx.fillText(`${buckets[59]} /s now, peak ${top} /s (last 60 s)`, 4, 12);
  canvas.dataset.lastSecond = String(buckets[58]);
}

// ---- channel ------------------------------------------------------------------------------------
async function loadChannel() {
  const body = $("channel-table").tBodies[0];
  body.replaceChildren();
  const kind = await api("GET", "/v2/notification/channel");
  if (kind.status !== 200) { body.append(Object.assign(document.createElement("tr"), { textContent: "no channel" })); return; }
  const mechanism = kind.data.delivery_mechanism;
  const type = { WEB_SOCKET: "websocket", CALLBACK: "callback" }[mechanism];
  const details = type ? (await api("GET", "/v2/notification/" + type)).data : {};
  for (const [name, value] of Object.entries({ delivery_mechanism: mechanism, ...details })) {
    const row = document.createElement("tr");
    row.dataset.field = name;
    row.append(td(name), td(typeof value === "object" ? JSON.stringify(value) : value));
    body.append(row);
  }
}

// ---- routing ------------------------------------------------------------------------------------
async function route() {
  takeKeyFromFragment();
  if (!state.key) { show("login-view"); return; }
  if (!state.ws && !state.reconnect) connect();
  const hash = location.hash || "#devices";
  if (hash.startsWith("#device/")) { show("device-view"); await loadDevice(decodeURIComponent(hash.slice(8))); }
  else if (hash === "#channel") { show("channel-view"); await loadChannel(); }
  else { show("devices-view"); await loadDevices(); }
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("devicehub-key", $("key-input").value.trim());
  $("key-input").value = "";
  location.hash = "#devices";
  route();
});
$("logout").addEventListener("click", () => logout(""));
$("device-search").addEventListener("input", renderDevices);
$("device-state").addEventListener("change", loadDevices);
$("refresh-devices").addEventListener("click", loadDevices);
window.addEventListener("hashchange", route);
setInterval(drawRate, 1000);
route();
