// devicehub console: the key's notification channel (issue 34 #3, #5): its state and drops, why the service removed
// it, and its dead letters with their redrive. Loaded after console.js (its api, el, td and $).
"use strict";

const KIND_PATHS = { WEB_SOCKET: "websocket", CALLBACK: "callback" };

function fieldRow(name, value) {
  const text = value !== null && typeof value === "object" ? JSON.stringify(value) : value;
  const row = el("tr", null, td(name), td(text));
  row.dataset.field = name;
  return row;
}

function showRemoved(removed) {
  // GET /v2/notification/channel?include=status answers 404 with `removed` for a while after the service removed it
  const where = removed.url ? ` (${removed.url})` : "";
  $("channel-removed").textContent =
    `The service removed the ${removed.kind} channel${where} at ${removed.removed_at}: ${removed.reason} [${removed.cause}]`;
  $("channel-removed").hidden = false;
}

async function loadChannel() {
  const body = $("channel-table").tBodies[0];
  body.replaceChildren();
  $("channel-removed").hidden = true;
  $("dead-letters").hidden = true;
  const answer = await api("GET", "/v2/notification/channel?include=status");
  if (answer.status !== 200) {
    body.append(el("tr", null, td("no channel", "none")));
    if (answer.data && answer.data.removed) showRemoved(answer.data.removed);
    return;
  }
  const mechanism = answer.data.delivery_mechanism;
  const type = KIND_PATHS[mechanism];
  const details = type ? (await api("GET", "/v2/notification/" + type)).data || {} : {};
  // its state first (state, queue, oldest event, rate, last error, drops by cause), then what the key asked for
  const fields = { delivery_mechanism: mechanism, ...(answer.data.status || {}) };
  for (const [name, value] of Object.entries(details)) if (!(name in fields)) fields[name] = value;
  for (const [name, value] of Object.entries(fields)) body.append(fieldRow(name, value));
  await loadDeadLetters();
}

async function loadDeadLetters() {
  const answer = await api("GET", "/v2/notification/dead-letters");
  if (answer.status !== 200) return;
  const letters = answer.data.dead_letters;
  $("dead-count").textContent = `(${answer.data.count})`;
  $("redrive").disabled = letters.length === 0;
  $("dead-table").tBodies[0].replaceChildren(...letters.map((d) => {
    const queued = new Date(d.queued_at).toISOString();
    const row = el("tr", null, td(d.cursor ?? ""), td(d.kind), td(d.cause), td(queued), td(JSON.stringify(d.event)));
    row.dataset.cause = d.cause;
    return row;
  }));
  $("dead-letters").hidden = false;
}

$("redrive").addEventListener("click", async () => {
  const answer = await api("POST", "/v2/notification/dead-letters/redrive");
  $("redrive-result").textContent = answer.status === 202
    ? `${answer.data.redriven} queued again` : `redrive failed (${answer.status})`;
  await loadChannel();
});
