// devicehub operator console: a client of the documented API only (REST, the console's own live feed, /metrics).
// It never creates or changes a notification channel: the key may be an application's (issue 32 #2).
"use strict";

const state = {
  key: null, feed: null, feedRetry: null, device: null, model: null, asyncIds: {}, history: {},
  pages: [null], page: 0, subscribed: new Set(), lastMetrics: null, nodeTimer: null, rates: [],
};
const $ = (id) => document.getElementById(id);
const HISTORY = 60; // values kept per resource for its plot
const STATUS = { 0: "pending", 1: "written", 2: "failed" }; // spec §3.1 desired status
const NUMERIC = new Set(["integer", "unsigned integer", "float", "time"]);

function el(tag, props, ...children) {
  const node = Object.assign(document.createElement(tag), props || {});
  for (const child of children) if (child != null) node.append(child);
  return node;
}
function td(text, cls) { return el("td", { className: cls || "", textContent: text == null ? "" : String(text) }); }

function takeKeyFromFragment() {
  // `/#key=…`: the fragment never reaches the server; keep the key in this tab only and drop it from the URL
  const match = location.hash.match(/^#key=([^&]+)/);
  if (match) {
    sessionStorage.setItem("devicehub-key", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + "#devices");
  }
  state.key = sessionStorage.getItem("devicehub-key");
}

// Every call answers {status, data}; a 401 logs out and answers status 401 (no exception reaches the page).
async function api(method, path, body, headers) {
  if (!state.key) return { status: 401, data: null };
  const init = { method, headers: Object.assign({ Authorization: "Bearer " + state.key }, headers || {}) };
  if (body !== undefined) {
    if (typeof body === "string") init.body = body;
    else { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  }
  let response;
  try { response = await fetch(path, init); }
  catch (e) { return { status: 0, data: String(e) }; }
  if (response.status === 401) {
    logout("the key was refused (401)");
    return { status: 401, data: null };
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
  return { status: response.status, data };
}

function b64decode(value) {
  try { return new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(atob(value), (c) => c.charCodeAt(0))); }
  catch (e) { return null; }
}
function b64encode(text) { return btoa(String.fromCharCode(...new TextEncoder().encode(text))); }

function show(view) {
  const views = ["login-view", "devices-view", "device-view", "node-view", "channel-view", "campaigns-view", "campaign-view"];
  for (const id of views) $(id).hidden = id !== view;
  $("nav").hidden = view === "login-view";
  if (view !== "node-view" && state.nodeTimer) { clearInterval(state.nodeTimer); state.nodeTimer = null; }
}

function logout(reason) {
  sessionStorage.removeItem("devicehub-key");
  state.key = null;
  stopFeed();
  $("login-error").textContent = reason || "";
  show("login-view");
}

// ---- the object model (GET /v3/lwm2m-objects, once per login) ------------------------------------------
async function model() {
  if (state.model) return state.model;
  const { status, data } = await api("GET", "/v3/lwm2m-objects");
  const objects = {};
  if (status === 200) for (const o of data.data) objects[o.id] = { ...o, byId: Object.fromEntries(o.resources.map((r) => [r.id, r])) };
  state.model = objects;
  return objects;
}
function resourceOf(path) {
  const [o, , r] = path.split("/").filter(Boolean).map(Number);
  const object = state.model && state.model[o];
  return object && r !== undefined ? object.byId[r] || null : null;
}

// ---- devices: paged, filtered and sorted by the server ----------------------------------------------------
function deviceQuery(after) {
  const [sort, order] = $("device-sort").value.split(":");
  const params = new URLSearchParams({ limit: $("device-page-size").value, include: "total_count", order });
  if (sort !== "id") params.set("sort", sort);
  const name = $("device-search").value.trim();
  const type = $("device-type").value.trim();
  if (name) params.set("endpoint_name__eq", name);
  if (type) params.set("endpoint_type__eq", type);
  if ($("device-state").value) params.set("state__eq", $("device-state").value);
  if (after) params.set("after", after);
  return "/v3/devices?" + params.toString();
}

async function loadDevices() {
  const { status, data } = await api("GET", deviceQuery(state.pages[state.page]));
  const table = $("device-table");
  if (status !== 200) {
    $("device-count").textContent = status === 401 ? "" : `error ${status}: ${data && data.message ? data.message : ""}`;
    return;
  }
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const d of data.data) {
    const row = el("tr", { className: "clickable" });
    row.dataset.deviceId = d.id;
    row.append(td(d.endpoint_name, "endpoint-name"), td(d.endpoint_type), td(d.state, "state"),
      td(d.last_contact_at || "", "last-contact"), td(d.id, "muted"));
    row.addEventListener("click", () => { location.hash = "#device/" + d.id; });
    body.append(row);
  }
  const size = Number($("device-page-size").value);
  const first = state.page * size;
  $("device-count").textContent = data.total_count === 0 ? "none" :
    `${first + 1}–${first + data.data.length} of ${data.total_count}`;
  $("page-info").textContent = `page ${state.page + 1} of ${Math.max(1, Math.ceil(data.total_count / size))}`;
  $("page-prev").disabled = state.page === 0;
  $("page-first").disabled = state.page === 0;
  $("page-next").disabled = !data.has_more;
  state.nextAfter = data.data.length ? data.data[data.data.length - 1].id : null;
  table.dataset.page = String(state.page + 1);
}
function newSearch(event) {
  if (event) event.preventDefault();
  state.pages = [null];
  state.page = 0;
  return loadDevices();
}

// ---- one device: objects and instances as a tree -----------------------------------------------------------
function valueText(reported) {
  if (!reported) return "";
  if (reported.content_type === "text/plain") { const t = b64decode(reported.value); return t == null ? "" : t; }
  return `(${reported.content_type}, ${atob(reported.value).length} bytes)`;
}

async function loadDevice(id) {
  const [device, resources, echo, subscribed, events] = await Promise.all([
    api("GET", "/v3/devices/" + encodeURIComponent(id)),
    api("GET", "/v2/endpoints/" + encodeURIComponent(id)),
    api("GET", "/v3/devices/" + encodeURIComponent(id) + "/echo"),
    api("GET", "/v2/subscriptions/" + encodeURIComponent(id)), // this key's subscriptions, one path a line
    api("GET", "/v3/device-events?" + new URLSearchParams({ device_id: id, order: "DESC", limit: "50" })),
    model(),
  ]);
  showEvents(events.status === 200 ? events.data.data : []);
  state.subscribed = new Set(subscribed.status === 200 && typeof subscribed.data === "string" ?
    subscribed.data.split(/\r?\n/).filter(Boolean) : []);
  if (device.status !== 200) { $("device-title").textContent = id + " (not found)"; return; }
  if (!state.device || state.device.id !== id) { state.history = {}; $("request-log").replaceChildren(); $("result").textContent = ""; }
  state.device = device.data;
  $("device-title").textContent = device.data.endpoint_name;
  $("device-meta").textContent = `${device.data.id} · ${device.data.endpoint_type || "no type"} · ${device.data.state}` +
    ` · registered ${device.data.updated_at} · last contact ${device.data.last_contact_at || "never"}`;
  const echoed = {};
  for (const r of (echo.status === 200 ? echo.data.resources : [])) echoed[r.resource_path] = r;
  // objects → instances → resources: the registration's links (often instances only), the snapshot's paths, and
  // every resource the object model defines for an instance (what the device may have, as Leshan shows it)
  const tree = {};
  const add = (path) => {
    const [o, i, r] = path.split("/").filter(Boolean);
    if (o === undefined || !/^[0-9]+$/.test(o)) return;
    const instances = (tree[o] ||= {});
    if (i === undefined) return;
    const resources = (instances[i] ||= new Set());
    if (r !== undefined) resources.add(Number(r));
  };
  for (const resource of (resources.status === 200 ? resources.data : [])) add(resource.uri);
  for (const path of Object.keys(echoed)) add(path);
  for (const [o, instances] of Object.entries(tree)) {
    const object = state.model[o];
    if (object) for (const ids of Object.values(instances)) for (const r of object.resources) ids.add(r.id);
  }
  const box = $("resources");
  box.replaceChildren();
  for (const o of Object.keys(tree).sort((a, b) => a - b)) {
    const object = state.model[o];
    // the security and server objects (0, 1) are the bootstrap's business: shown folded
    const details = el("details", { className: "object", open: Number(o) > 1 },
      el("summary", null, `${object ? object.name : "Object"} `, el("span", { className: "muted" }, `/${o}` + (object ? "" : " (not in the object model)"))));
    details.dataset.object = o;
    for (const i of Object.keys(tree[o]).sort((a, b) => a - b)) {
      const table = el("table", { className: "resource-table" },
        el("thead", null, el("tr", null, ...["Resource", "Value", "Reported at", "Desired", "Plot", "Operations"].map((h) => el("th", null, h)))));
      const body = el("tbody");
      for (const r of [...tree[o][i]].sort((a, b) => a - b)) body.append(resourceRow(`/${o}/${i}/${r}`, echoed[`/${o}/${i}/${r}`] || {}));
      table.append(body);
      const readAll = el("button", { type: "button", textContent: "read instance" });
      readAll.dataset.action = "read-instance";
      readAll.addEventListener("click", () => deviceRequest(`read /${o}/${i}`, { method: "GET", uri: `/${o}/${i}`, accept: "application/vnd.oma.lwm2m+tlv" }));
      const instance = el("div", { className: "instance" }, el("h4", null, `Instance ${i} `, readAll), table);
      instance.dataset.instance = `/${o}/${i}`;
      details.append(instance);
    }
    box.append(details);
  }
  box.dataset.loaded = id;
}

// issue 32 #3: the device's lifecycle history (GET /v3/device-events), newest first
function showEvents(events) {
  const body = $("device-events").querySelector("tbody");
  body.replaceChildren(...events.map((e) => {
    const changes = Object.entries(e.changes || {}).map(([k, v]) => `${k}: ${v}`).join(", ");
    const row = el("tr", null, td(e.date_time, "when"), td(e.event_type_description, "event"), td(changes, "changes"));
    row.dataset.event = e.event_type;
    return row;
  }));
  if (!events.length) body.append(el("tr", null, el("td", { colSpan: 3, className: "none muted", textContent: "no events kept" })));
}

function resourceRow(path, echoed) {
  const def = resourceOf(path);
  const row = el("tr");
  row.dataset.path = path;
  const name = el("td", { className: "name" }, def ? def.name : path.split("/").pop(), " ",
    el("span", { className: "muted" }, path));
  if (def && def.description) name.title = def.description;
  const value = el("td", { className: "value" }, el("span", { className: "reported", textContent: valueText(echoed.reported) }),
    el("span", { className: "units", textContent: def && def.units ? def.units : "" }));
  const desired = echoed.desired;
  const desiredText = desired ? `${b64decode(desired.value) ?? "(bytes)"} — ${STATUS[desired.status] || desired.status}` : "";
  row.append(name, value, td(echoed.reported ? echoed.reported.reported_at : "", "reported-at"),
    td(desiredText, "desired-status"), el("td", { className: "plot" }));
  const actions = td("", "actions");
  const ops = def ? def.operations : "RWE"; // a resource the model does not know: every operation is offered
  const buttons = [];
  if (ops.includes("R")) buttons.push(["read", () => readPath(path)]);
  if (ops.includes("W")) buttons.push(["write", () => openWriteForm(row, path, def)]);
  if (ops === "E" || !def) buttons.push(["execute", () => executePath(path)]);
  if (ops.includes("R")) buttons.push(state.subscribed.has(path) ? ["cancel observe", () => cancelObserve(path)] : ["observe", () => observePath(path)]);
  for (const [label, run] of buttons) {
    const button = el("button", { type: "button", textContent: label });
    button.dataset.action = label.replace(" ", "-");
    button.addEventListener("click", run);
    actions.append(button);
  }
  row.append(actions);
  if (state.history[path]) drawSpark(row, path);
  else if (def && NUMERIC.has(def.type) && echoed.reported) remember(path, valueText(echoed.reported));
  return row;
}

function openWriteForm(row, path, def) {
  const open = row.nextElementSibling;
  if (open && open.classList.contains("write-form")) { open.remove(); return; }
  const type = def ? def.type : "string";
  let input;
  if (type === "boolean") {
    input = el("select", null, el("option", { value: "1", textContent: "true (1)" }), el("option", { value: "0", textContent: "false (0)" }));
  } else {
    input = el("input", { required: true });
    if (NUMERIC.has(type)) { input.type = "number"; input.step = type === "float" ? "any" : "1"; if (type === "unsigned integer") input.min = "0"; }
  }
  input.className = "write-value";
  const form = el("form", null, el("label", null, `${def ? def.name : path} (${type || "untyped"}${def && def.units ? ", " + def.units : ""}) `), input,
    el("button", { type: "submit", textContent: "Write" }), el("span", { className: "write-error error" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const refused = await writePath(path, input.value);
    form.querySelector(".write-error").textContent = refused || "";
    if (!refused) form.closest("tr").remove();
  });
  const cell = el("td", { colSpan: 6 }, form);
  row.after(el("tr", { className: "write-form" }, cell));
  input.focus();
}

function logRequest(text) {
  const item = el("li", { textContent: `${new Date().toLocaleTimeString()} ${text}` });
  $("request-log").prepend(item);
  return item;
}
function showResult(text, ok) {
  const box = $("result");
  box.textContent = text;
  box.className = "result " + (ok ? "ok" : "error");
}

async function deviceRequest(label, body) {
  const asyncId = "console-" + Math.random().toString(16).slice(2, 10);
  const item = logRequest(`${label}: sent (${asyncId})`);
  state.asyncIds[asyncId] = { label, item, path: body.uri };
  showResult(`${label}: sent`, true);
  const { status, data } = await api("POST", `/v2/device-requests/${encodeURIComponent(state.device.id)}?async-id=${asyncId}`, body);
  if (status !== 202) {
    delete state.asyncIds[asyncId];
    const why = typeof data === "string" ? data : JSON.stringify(data);
    item.textContent += ` refused ${status} ${why}`;
    showResult(`${label}: refused (${status} ${why})`, false);
    return `${status} ${why}`;
  }
  return null;
}
function readPath(path) { return deviceRequest("read " + path, { method: "GET", uri: path }); }
function executePath(path) { return deviceRequest("execute " + path, { method: "POST", uri: path }); }
function writePath(path, value) {
  return deviceRequest("write " + path, { method: "PUT", uri: path, "content-type": "text/plain", "payload-b64": b64encode(value) });
}
async function observePath(path) {
  const { status } = await api("PUT", `/v2/subscriptions/${encodeURIComponent(state.device.id)}${path}`);
  logRequest(`observe ${path}: ${status}`);
  showResult(`observe ${path}: ${status === 200 || status === 202 ? "subscribed" : "refused " + status}`, status < 300);
  await loadDevice(state.device.id);
}
async function cancelObserve(path) {
  const { status } = await api("DELETE", `/v2/subscriptions/${encodeURIComponent(state.device.id)}${path}`);
  logRequest(`cancel observe ${path}: ${status}`);
  showResult(`cancel observe ${path}: ${status === 204 ? "cancelled" : "refused " + status}`, status === 204);
  await loadDevice(state.device.id);
}

// ---- values, and the plot of a numeric resource's recent ones (inline SVG) --------------------------------
function remember(path, text) {
  const def = resourceOf(path);
  const number = Number(text);
  if (!def || !NUMERIC.has(def.type) || text === "" || !Number.isFinite(number)) return;
  const values = (state.history[path] ||= []);
  values.push(number);
  if (values.length > HISTORY) values.shift();
}

function sparkline(values, width, height) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const low = Math.min(...values), high = Math.max(...values);
  const span = high - low || 1;
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - ((v - low) / span) * (height - 4)).toFixed(1)}`).join(" "));
  svg.append(line);
  const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
  title.textContent = `${values.length} values, ${low} … ${high}`;
  svg.append(title);
  return svg;
}

function drawSpark(row, path) {
  const values = state.history[path] || [];
  const cell = row.querySelector("td.plot");
  if (!cell || values.length < 2) return;
  const svg = sparkline(values, 120, 24);
  svg.classList.add("spark");
  svg.dataset.points = String(values.length);
  cell.replaceChildren(svg);
}

function setValue(deviceId, path, text, when) {
  remember(path, text);
  if (!state.device || state.device.id !== deviceId) return;
  const row = document.querySelector(`#resources tr[data-path="${CSS.escape(path)}"]`);
  if (!row) return;
  row.querySelector(".reported").textContent = text;
  row.querySelector(".reported-at").textContent = when;
  drawSpark(row, path);
  row.classList.remove("flash");
  void row.offsetWidth;
  row.classList.add("flash");
}

// ---- the console's live feed: a WebSocket at /v3/console/feed (messages: JSON arrays of events) -------------
function setLive(live) {
  $("live-state").textContent = live ? "live" : "offline";
  $("live-state").classList.toggle("live", live);
}
function stopFeed() {
  if (state.feed) { state.feed.onclose = null; state.feed.close(); state.feed = null; }
  if (state.feedRetry) { clearTimeout(state.feedRetry); state.feedRetry = null; }
  setLive(false);
}
function startFeed() {
  if (state.feed || state.feedRetry || !state.key) return;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  // the key as a sub-protocol, as /v2/notification/websocket-connect takes it (a browser WebSocket has no headers)
  const ws = new WebSocket(`${scheme}//${location.host}/v3/console/feed`, ["wss", "pelion_" + state.key]);
  state.feed = ws;
  ws.onopen = () => setLive(true);
  ws.onmessage = (message) => { for (const event of JSON.parse(message.data)) onFeedEvent(event); };
  ws.onclose = (closed) => {
    state.feed = null;
    setLive(false);
    if (closed.code === 1008) { logout("the key was refused (401)"); return; }
    if (state.key) state.feedRetry = setTimeout(() => { state.feedRetry = null; startFeed(); }, 3000);
  };
}

function onFeedEvent(event) {
  const when = new Date().toISOString();
  if (event.kind === "notification") {
    for (const v of event.values || []) setValue(event.device_id, v.path, v.value == null ? `(${v.ct})` : v.value, when);
  } else if (event.kind === "async-response") {
    const pending = state.asyncIds[event.id];
    if (!pending) return;
    delete state.asyncIds[event.id];
    const text = event.payload ? b64decode(event.payload) : "";
    const outcome = `${event.status}${text ? " " + text : ""}${event.error ? " " + event.error : ""}`;
    pending.item.textContent += ` → ${outcome}`;
    pending.item.classList.add("answered");
    showResult(`${pending.label}: ${outcome}`, event.status < 300);
    if (pending.label.startsWith("read ") && event.status === 200 && state.device && text != null && event.ct === "text/plain")
      setValue(state.device.id, pending.path, text, when);
    else if (pending.label.startsWith("read ") || pending.label.startsWith("write "))
      if (state.device) loadDevice(state.device.id); // typed values of TLV answers, desired status: from the echo
  } else if (["registration", "reg-update", "de-registration", "registration-expired"].includes(event.kind)) {
    if (!$("devices-view").hidden) loadDevices();
  } else if (event.kind === "channel-removed") {
    if (!$("channel-view").hidden) loadChannel(); // channel.js: the removal says what, when and why
  } else if (event.kind === "firmware-update") { // issue 33: a campaign's phase, or one of its devices' state
    const what = event.ep ? `${event.ep} ${event.state}` : `phase ${event.phase}`;
    const why = event.reason ? ` (${event.reason})` : "";
    showResult(`campaign ${event.campaign}: ${what}${why}`, event.state !== "failed_connector_channel_update");
    onCampaignEvent(event); // campaigns.js: the campaign views follow it
  }
}

// ---- routing --------------------------------------------------------------------------------------------
async function route() {
  takeKeyFromFragment();
  if (!state.key) { show("login-view"); return; }
  startFeed();
  const hash = location.hash || "#devices";
  if (hash.startsWith("#device/")) { show("device-view"); await loadDevice(decodeURIComponent(hash.slice(8))); }
  else if (hash === "#channel") { show("channel-view"); await loadChannel(); }
  else if (hash === "#campaigns") { show("campaigns-view"); await loadCampaigns(); }
  else if (hash.startsWith("#campaign/")) { show("campaign-view"); await loadCampaign(decodeURIComponent(hash.slice(10))); }
  else if (hash === "#node") {
    show("node-view");
    await loadNode();
    if (!state.nodeTimer) state.nodeTimer = setInterval(loadNode, 2000);
  } else { show("devices-view"); await loadDevices(); }
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("devicehub-key", $("key-input").value.trim());
  $("key-input").value = "";
  state.model = null;
  location.hash = "#devices";
  route();
});
$("logout").addEventListener("click", () => logout(""));
$("device-filter").addEventListener("submit", newSearch);
for (const id of ["device-state", "device-sort", "device-page-size"]) $(id).addEventListener("change", () => newSearch());
$("page-next").addEventListener("click", () => { if (state.nextAfter) { state.pages[state.page + 1] = state.nextAfter; state.page += 1; loadDevices(); } });
$("page-prev").addEventListener("click", () => { if (state.page > 0) { state.page -= 1; loadDevices(); } });
$("page-first").addEventListener("click", () => { state.page = 0; loadDevices(); });
window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", route); // after channel.js, node.js and campaigns.js have loaded
