// devicehub console: firmware update campaigns (issue 33): the account's campaigns with their phase and counts, and
// one campaign's statistics, its devices' states, and its start and stop buttons. Only the documented REST calls
// (/v3/update-campaigns…); the live feed's firmware-update events refresh the view shown. Loaded after console.js
// (its api, el, td, $ and state).
"use strict";

const STARTABLE = new Set(["draft"]); // the API answers 409 to any other move; the buttons offer only legal ones
const STOPPABLE = new Set(["starting", "active"]);
const FAILED = "failed_connector_channel_update";

const campaignPath = (id) => "/v3/update-campaigns/" + encodeURIComponent(id);

function errorText(answer) {
  const data = answer.data;
  return `${answer.status} ${data && data.message ? data.message : typeof data === "string" ? data : ""}`.trim();
}

async function loadCampaigns() {
  const answer = await api("GET", "/v3/update-campaigns?limit=50");
  const body = $("campaign-table").tBodies[0];
  if (answer.status !== 200) { $("campaign-count").textContent = `error ${errorText(answer)}`; return; }
  const campaigns = answer.data.data;
  // each campaign's counts (GET …/metrics: total, success, failed, skipped, pending), side by side
  const metrics = await Promise.all(campaigns.map((c) => api("GET", campaignPath(c.id) + "/metrics")));
  body.replaceChildren(...campaigns.map((c, i) => {
    const m = metrics[i].status === 200 ? metrics[i].data : {};
    const row = el("tr", { className: "clickable" }, td(c.name, "name"), td(c.phase, "phase"),
      td(m.success_count, "success"), td(m.failed_count, "failed"), td(m.skipped_count, "skipped"),
      td(m.pending_count, "pending"), td(c.autostop_reason, "reason"), td(c.id, "muted"));
    row.dataset.campaignId = c.id;
    row.dataset.phase = c.phase;
    row.addEventListener("click", () => { location.hash = "#campaign/" + c.id; });
    return row;
  }));
  if (!campaigns.length) body.append(el("tr", null, el("td", { colSpan: 8, className: "none muted", textContent: "no campaign" })));
  $("campaign-count").textContent = `(${campaigns.length}${answer.data.has_more ? "+" : ""})`;
}

async function campaignDevices(id) {
  const devices = [];
  let after = null;
  for (let pages = 0; pages < 20; pages += 1) { // at most 20 000 devices shown
    const query = new URLSearchParams({ limit: "1000" });
    if (after) query.set("after", after);
    const answer = await api("GET", `${campaignPath(id)}/campaign-device-metadata?${query}`);
    if (answer.status !== 200) break;
    devices.push(...answer.data.data);
    if (!answer.data.has_more || !answer.data.data.length) break;
    after = answer.data.data[answer.data.data.length - 1].device_id; // the store pages by device id
  }
  return devices;
}

async function loadCampaign(id) {
  state.campaign = id;
  const [campaign, statistics, metrics, devices] = await Promise.all([
    api("GET", campaignPath(id)),
    api("GET", campaignPath(id) + "/statistics"),
    api("GET", campaignPath(id) + "/metrics"),
    campaignDevices(id),
  ]);
  if (state.campaign !== id) return; // another campaign was opened meanwhile
  if (campaign.status !== 200) {
    $("campaign-title").textContent = `${id} (${errorText(campaign)})`;
    $("campaign-start").disabled = $("campaign-stop").disabled = true;
    return;
  }
  const c = campaign.data;
  $("campaign-title").textContent = c.name;
  $("campaign-phase").textContent = c.phase;
  $("campaign-view").dataset.phase = c.phase;
  const rules = [`filter ${c.device_filter}`, `delivery ${c.delivery}`];
  if (c.waves.length) rules.push(`waves ${c.waves.join(" → ")} %`);
  if (c.halt_failure_percent != null) rules.push(`halt past ${c.halt_failure_percent} % failed of ${c.halt_min_finished}`);
  if (c.max_starts_per_minute != null) rules.push(`${c.max_starts_per_minute} starts/min`);
  if (c.device_deadline_seconds != null) rules.push(`deadline ${c.device_deadline_seconds} s`);
  if (c.autostop_reason) rules.push(`stopped: ${c.autostop_reason}`);
  $("campaign-meta").textContent = `${c.id} · ${rules.join(" · ")}`;
  $("campaign-start").disabled = !STARTABLE.has(c.phase);
  $("campaign-stop").disabled = !STOPPABLE.has(c.phase);
  // Pelion's statistics (success, fail, info = still pending, skipped) and the total
  const figures = statistics.status === 200 ? statistics.data.data.map((s) => [s.id, s.count]) : [];
  if (metrics.status === 200) figures.push(["total", metrics.data.total_count]);
  $("campaign-figures").replaceChildren(...figures.map(([name, count]) => {
    const box = el("div", { className: "figure" }, el("div", { className: "value", textContent: String(count) }),
      el("div", { className: "label", textContent: name }));
    box.dataset.figure = name;
    return box;
  }));
  const body = $("campaign-devices").tBodies[0];
  body.replaceChildren(...devices.map((d) => {
    const row = el("tr", { className: d.deployment_state === FAILED ? "failed" : "" }, td(d.name, "name"),
      td(d.deployment_state, "state"), td(d.step, "step"), td(d.update_result, "update-result"),
      td(d.firmware_version, "version"), td(d.description, "why"), td(d.updated_at, "muted"));
    row.dataset.deviceId = d.device_id;
    row.dataset.state = d.deployment_state;
    return row;
  }));
  if (!devices.length) body.append(el("tr", null, el("td", { colSpan: 7, className: "none muted", textContent: "no device chosen yet" })));
}

async function moveCampaign(verb) {
  const id = state.campaign;
  const answer = await api("POST", `${campaignPath(id)}/${verb}`);
  $("campaign-result").textContent = answer.status === 202 ? `${verb}: accepted` : `${verb} refused (${errorText(answer)})`;
  $("campaign-result").className = answer.status === 202 ? "ok" : "error";
  await loadCampaign(id);
}

// a firmware-update event of the feed (console.js): a campaign's phase, or a device's state, changed
let campaignReload = null;
const campaignsMoved = new Set();
function onCampaignEvent(event) {
  campaignsMoved.add(event.campaign);
  if (campaignReload) return; // one reload for a burst of device events
  campaignReload = setTimeout(() => {
    campaignReload = null;
    if (!$("campaigns-view").hidden) loadCampaigns();
    else if (!$("campaign-view").hidden && campaignsMoved.has(state.campaign)) loadCampaign(state.campaign);
    campaignsMoved.clear();
  }, 200);
}

$("campaign-start").addEventListener("click", () => moveCampaign("start"));
$("campaign-stop").addEventListener("click", () => moveCampaign("stop"));
