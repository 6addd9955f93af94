// devicehub console: the node page (issue 32 #2): what /metrics has, for a person, and the oldest event of each
// channel of the account (GET /v3/console/channels). Loaded after console.js (its api, el, td, sparkline and $).
"use strict";

// ---- the node: /metrics for a person ---------------------------------------------------------------------
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    samples.push({ name: match[1], labels, value: Number(match[4]) });
  }
  return samples;
}
const sum = (samples, name, filter) => samples.filter((s) => s.name === name && (!filter || filter(s.labels))).reduce((a, s) => a + s.value, 0);

async function loadNode() {
  let text;
  try { text = await (await fetch("/metrics")).text(); } catch (e) { return; }
  const samples = parseMetrics(text);
  const now = Date.now();
  const enqueued = sum(samples, "devicehub_events_enqueued_total");
  const notified = sum(samples, "devicehub_notifications_total");
  const previous = state.lastMetrics;
  const per = (now2, then) => (previous ? Math.max(0, (now2 - then) / ((now - previous.at) / 1000)) : 0);
  const rate = per(notified, previous && previous.notified);
  const enqueueRate = per(enqueued, previous && previous.enqueued);
  state.lastMetrics = { at: now, enqueued, notified };
  (state.rates ||= []).push(rate);
  if (state.rates.length > 30) state.rates.shift();
  const figures = [
    ["registered", "Registered devices", sum(samples, "devicehub_registered_devices")],
    ["events-rate", "Notifications/s from devices", rate.toFixed(1)],
    ["enqueue-rate", "Events/s into channels", enqueueRate.toFixed(1)],
    ["channels", "Channels", sum(samples, "devicehub_channels")],
    ["queued", "Events queued", sum(samples, "devicehub_queue_events")],
    ["queued-bytes", "Bytes queued", sum(samples, "devicehub_queue_bytes")],
    ["dropped", "Events shed", sum(samples, "devicehub_events_dropped_total")],
    ["refused", "CoAP refused (rate limit)", sum(samples, "devicehub_coap_rate_limited_total")],
    ["udp-drops", "UDP receive drops", sum(samples, "devicehub_udp_receive_drops_total")],
    ["http-429", "HTTP answered 429", sum(samples, "devicehub_http_requests_total", (l) => l.status === "429")],
    ["pending", "Device requests pending", sum(samples, "devicehub_device_requests_pending")],
    ["websockets", "WebSocket connections", sum(samples, "devicehub_websocket_connections")],
  ];
  $("node-figures").replaceChildren(...figures.map(([id, label, value]) => {
    const box = el("div", { className: "figure" }, el("div", { className: "value", textContent: String(value) }), el("div", { className: "label", textContent: label }));
    box.dataset.figure = id;
    return box;
  }));
  const plot = state.rates.length > 1 ? sparkline(state.rates, 600, 110) : el("span", { className: "muted", textContent: "collecting…" });
  $("rate-plot").replaceChildren(plot);
  const queues = samples.filter((s) => s.name === "devicehub_channel_queue_events");
  const bytes = Object.fromEntries(samples.filter((s) => s.name === "devicehub_channel_queue_bytes").map((s) => [s.labels.key_id, s.value]));
  $("queue-table").tBodies[0].replaceChildren(...queues.map((s) => {
    const id = s.labels.key_id;
    return el("tr", null, td(id), td(s.value), td(bytes[id] ?? ""));
  }));
  await loadAccountChannels();
  $("node-updated").textContent = "updated " + new Date().toLocaleTimeString();
}

// the account's channels (every key's for an administrator key, the key's own otherwise) with their oldest event
function age(seconds) {
  if (seconds == null) return "";
  if (seconds < 60) return seconds.toFixed(1) + " s";
  if (seconds < 3600) return (seconds / 60).toFixed(1) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

async function loadAccountChannels() {
  const answer = await api("GET", "/v3/console/channels");
  if (answer.status !== 200) return;
  $("account-channels").tBodies[0].replaceChildren(...answer.data.data.map((c) => {
    const row = el("tr", null, td(c.key_name || c.key_id), td(c.kind), td(c.status.state), td(c.status.queue_size),
      td(age(c.status.oldest_age_s)), td(c.status.drops.byte_cap + c.status.drops.lifetime + c.status.drops.failed));
    row.dataset.key = c.key_id;
    row.dataset.oldest = c.status.oldest_age_s == null ? "" : String(c.status.oldest_age_s);
    return row;
  }));
}
