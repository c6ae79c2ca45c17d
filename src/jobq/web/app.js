// jobq's web UI: plain JavaScript, no build step. Every text that comes from jobs or
// schedules goes into the page through textContent (never innerHTML), so a description
// holding markup shows as text.
"use strict";

const TOKEN_KEY = "jobq.token";
const REFRESH_MS = 1000;
const STATUS_ORDER = ["running", "pending", "paused", "failed", "canceled", "succeeded"];

let timer = null;
let view = null;
let needLogin = false;

// ------------------------------------------------------------------ helpers

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

function ago(iso) {
  if (!iso) return "";
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (!isFinite(seconds)) return iso;
  const abs = Math.abs(seconds);
  let text;
  if (abs < 60) text = `${Math.round(abs)}s`;
  else if (abs < 3600) text = `${Math.round(abs / 60)}m`;
  else if (abs < 86400) text = `${Math.round(abs / 3600)}h`;
  else text = `${Math.round(abs / 86400)}d`;
  return seconds >= 0 ? `${text} ago` : `in ${text}`;
}

function timeCell(iso) {
  return el("time", { datetime: iso || "", title: iso || "", text: ago(iso) });
}

function flash(text, isError) {
  const node = $("flash");
  node.textContent = text;
  node.className = isError ? "flash error" : "flash";
  node.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { node.hidden = true; }, 4000);
}

// ------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (response.status === 401) {
    showLogin(token ? "That token was not accepted." : "");
    throw new ApiError(401, (data && data.error) || "Authentication required");
  }
  if (!response.ok) {
    throw new ApiError(response.status, (data && data.error) || response.statusText);
  }
  return data;
}

function showLogin(message) {
  needLogin = true;
  stopTimer();
  for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("login-token").focus();
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("login-token").value.trim());
  $("login-token").value = "";
  needLogin = false;
  route();
});

async function act(method, path, body, done) {
  try {
    await api(method, path, body);
    if (done) flash(done);
    refresh();
  } catch (error) {
    if (error.status !== 401) flash(error.message, true);
  }
}

// ------------------------------------------------------------------ progress and status

function progressBar(job) {
  const fraction = job.fraction_completed;
  const known = typeof fraction === "number";
  const percent = known ? Math.round(fraction * 1000) / 10 : 0;
  const fill = el("div", { class: "fill" });
  fill.style.width = `${known ? percent : 0}%`;
  const bar = el("div", {
    class: `bar status-${job.status}`, role: "progressbar", "aria-valuemin": 0,
    "aria-valuemax": 100, "aria-valuenow": known ? percent : null,
    "data-progress": known ? fraction : "",
  }, fill);
  const label = el("span", { class: "progress-text" });
  label.textContent = (known ? `${percent}%` : "") +
    (job.running_status ? ` ${job.running_status}` : "");
  return el("div", { class: "progress" }, bar, label);
}

function updateProgress(container, job) {
  const bar = container.querySelector(".bar");
  const fraction = job.fraction_completed;
  const known = typeof fraction === "number";
  const percent = known ? Math.round(fraction * 1000) / 10 : 0;
  bar.className = `bar status-${job.status}`;
  bar.querySelector(".fill").style.width = `${percent}%`;
  if (known) bar.setAttribute("aria-valuenow", String(percent));
  else bar.removeAttribute("aria-valuenow");
  bar.setAttribute("data-progress", known ? String(fraction) : "");
  container.querySelector(".progress-text").textContent = (known ? `${percent}%` : "") +
    (job.running_status ? ` ${job.running_status}` : "");
}

function statusBadge(status, extra) {
  return el("span", { class: `status status-${status}`, text: status + (extra || "") });
}

function jobActions(job, compact) {
  const id = encodeURIComponent(job.id);
  const buttons = [];
  const button = (label, action, title) => el("button", {
    type: "button", class: `action action-${action}`, "data-action": action, title,
    onclick: (event) => {
      event.preventDefault();
      event.stopPropagation();
      act("POST", `/api/jobs/${id}/${action}`, {}, `${label}: ${job.name}`);
    },
  }, label);
  if (job.status === "pending" || (job.status === "running" && !job.pause_requested)) {
    buttons.push(button("Pause", "pause", "Pause this job"));
  }
  if (job.status === "paused" || job.pause_requested) {
    buttons.push(button("Resume", "resume", "Resume this job"));
  }
  if (["pending", "running", "paused"].includes(job.status) && !job.cancel_requested) {
    buttons.push(button("Cancel", "cancel", "Cancel this job"));
  }
  if (!compact && ["succeeded", "failed", "canceled"].includes(job.status)) {
    buttons.push(el("button", {
      type: "button", class: "action action-delete", "data-action": "delete",
      onclick: async () => {
        try {
          await api("DELETE", `/api/jobs/${id}`);
          location.hash = "#/";
        } catch (error) { if (error.status !== 401) flash(error.message, true); }
      },
    }, "Delete"));
  }
  return el("span", { class: "actions" }, ...buttons);
}

function statusSuffix(job) {
  if (job.cancel_requested && job.status === "running") return " (canceling)";
  if (job.pause_requested && job.status === "running") return " (pausing)";
  return "";
}

// ------------------------------------------------------------------ jobs page

const jobRows = new Map();

function jobsQuery() {
  const params = new URLSearchParams({ limit: "200" });
  const status = $("filter-status").value;
  const name = $("filter-name").value.trim();
  if (status) params.append("status", status);
  if (name) params.set("name", name);
  return params.toString();
}

function makeJobRow(job) {
  const row = el("tr", { "data-id": job.id });
  row.cells_ = {
    status: el("td", { class: "col-status" }),
    name: el("td", { class: "col-name" }),
    description: el("td", { class: "col-description" }),
    progress: el("td", { class: "col-progress" }, progressBar(job)),
    created: el("td", { class: "col-created" }),
    attempts: el("td", { class: "col-attempts" }),
    actions: el("td", { class: "col-actions" }),
  };
  row.append(...Object.values(row.cells_));
  return row;
}

function fillJobRow(row, job) {
  const c = row.cells_;
  row.dataset.status = job.status;
  clear(c.status); c.status.append(statusBadge(job.status, statusSuffix(job)));
  clear(c.name);
  c.name.append(el("a", { href: `#/jobs/${encodeURIComponent(job.id)}`, text: job.name }));
  c.description.textContent = job.description || "";
  c.description.title = job.error || job.description || "";
  updateProgress(c.progress.firstChild, job);
  clear(c.created); c.created.append(timeCell(job.created));
  c.attempts.textContent = job.max_attempts ? `${job.attempts}/${job.max_attempts}` :
    String(job.attempts);
  const signature = `${job.status}|${job.pause_requested}|${job.cancel_requested}`;
  if (row.dataset.actions !== signature) {
    row.dataset.actions = signature;
    clear(c.actions); c.actions.append(jobActions(job, true));
  }
}

async function loadJobs() {
  const page = await api("GET", `/api/jobs?${jobsQuery()}`);
  const tbody = $("jobs-table").tBodies[0];
  const seen = new Set();
  let previous = null;
  for (const job of page.jobs) {
    seen.add(job.id);
    let row = jobRows.get(job.id);
    if (!row) { row = makeJobRow(job); jobRows.set(job.id, row); }
    fillJobRow(row, job);
    const wanted = previous ? previous.nextSibling : tbody.firstChild;
    if (wanted !== row) tbody.insertBefore(row, wanted);
    previous = row;
  }
  for (const [id, row] of jobRows) {
    if (!seen.has(id)) { row.remove(); jobRows.delete(id); }
  }
  $("jobs-empty").hidden = page.jobs.length > 0;
  $("jobs-count").textContent = page.next_cursor ? `first ${page.jobs.length} jobs` :
    `${page.jobs.length} job${page.jobs.length === 1 ? "" : "s"}`;
}

$("filter-status").addEventListener("change", () => { saveFilters(); refresh(); });
$("filter-name").addEventListener("input", () => { saveFilters(); refresh(); });

function saveFilters() {
  sessionStorage.setItem("jobq.filters", JSON.stringify({
    status: $("filter-status").value, name: $("filter-name").value,
  }));
}

function loadFilters() {
  try {
    const saved = JSON.parse(sessionStorage.getItem("jobq.filters") || "{}");
    if (typeof saved.status === "string") $("filter-status").value = saved.status;
    if (typeof saved.name === "string") $("filter-name").value = saved.name;
  } catch (e) { /* ignore */ }
}

// ------------------------------------------------------------------ job page

function decodeBase64(text) {
  const binary = atob(text || "");
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function preview(base64, limit) {
  if (base64 === null || base64 === undefined) return { kind: "", text: "" };
  const bytes = decodeBase64(base64);
  if (bytes.length === 0) return { kind: "(empty)", text: "" };
  const shown = bytes.subarray(0, limit);
  const more = bytes.length > limit ? `\n… ${bytes.length - limit} more bytes` : "";
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(shown);
    if (!/[\u0000-\u0008\u000e-\u001f]/.test(text)) {
      let pretty = text;
      try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* text */ }
      return { kind: `(${bytes.length} bytes, text)`, text: pretty + more };
    }
  } catch (e) { /* not UTF-8: hex below */ }
  const lines = [];
  for (let offset = 0; offset < shown.length; offset += 16) {
    const chunk = Array.from(shown.subarray(offset, offset + 16));
    const hex = chunk.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = chunk.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${offset.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return { kind: `(${bytes.length} bytes, hex)`, text: lines.join("\n") + more };
}

const JOB_FIELDS = [
  ["id", "ID"], ["name", "Name"], ["description", "Description"], ["status", "Status"],
  ["priority", "Priority"], ["attempts", "Attempts"], ["max_attempts", "Max attempts"],
  ["fails", "Fails"], ["max_fails", "Max fails"], ["ttr_ms", "TTR (ms)"], ["ttl_ms", "TTL (ms)"],
  ["created", "Created"], ["time", "Due"], ["started", "Started"], ["modified", "Modified"],
  ["finished", "Finished"], ["running_status", "Running status"], ["lease", "Lease"],
  ["checkpoint_size", "Checkpoint size"], ["payload_size", "Payload size"],
  ["creator", "Creator"], ["created_by", "Created by"], ["reason", "Reason"],
];

function fieldText(key, value) {
  if (value === null || value === undefined || value === "") return "—";
  if (key === "lease") return `${value.worker_id || "?"} until ${value.expires || "?"}`;
  if (key === "created_by") return `${value.type} ${value.id}`;
  if (key === "checkpoint_size" || key === "payload_size") return `${value} bytes`;
  return String(value);
}

async function loadJob(id) {
  const path = `/api/jobs/${encodeURIComponent(id)}`;
  const [job, history] = await Promise.all([
    api("GET", path),
    api("GET", `${path}/history`).catch((error) => {
      if (error.status === 401) throw error;
      return { events: [] };
    }),
  ]);
  $("job-title").textContent = job.name;
  const status = $("job-status");
  status.textContent = job.status + statusSuffix(job);
  status.className = `status status-${job.status}`;
  const actions = $("job-actions");
  clear(actions); actions.append(jobActions(job, false));
  const progress = $("job-progress");
  if (!progress.firstChild) progress.append(progressBar(job));
  updateProgress(progress.firstChild, job);

  const fields = $("job-fields").tBodies[0];
  clear(fields);
  for (const [key, label] of JOB_FIELDS) {
    const value = job[key];
    const cell = el("td", { "data-field": key });
    if (["created", "time", "started", "modified", "finished"].includes(key) && value) {
      cell.append(el("span", { text: value }), " ", el("span", { class: "muted", text: `(${ago(value)})` }));
    } else {
      cell.textContent = fieldText(key, value);
    }
    fields.append(el("tr", {}, el("th", { text: label }), cell));
  }
  $("job-error").textContent = job.error || "—";
  const payload = preview(job.payload, 4096);
  $("job-payload-kind").textContent = payload.kind;
  $("job-payload").textContent = payload.text;
  const result = preview(job.result, 4096);
  $("job-result-kind").textContent = result.kind;
  $("job-result").textContent = job.result === null ? "—" : result.text;

  const timeline = $("job-history");
  clear(timeline);
  if (!history.events.length) {
    timeline.append(el("li", { class: "muted", text: "No history (an in-memory server keeps none)." }));
  }
  for (const event of history.events) {
    timeline.append(el("li", { class: `event event-${event.event.replace(/\W+/g, "-")}` },
      el("time", { datetime: event.time || "", title: event.time || "", text: event.time || "" }),
      el("strong", { text: event.event }),
      el("span", { class: "muted", text: event.actor ? ` by ${event.actor}` : "" }),
      el("span", { class: "detail", text: event.detail ? ` — ${event.detail}` : "" })));
  }
}

// ------------------------------------------------------------------ schedules page

function scheduleWhen(s) {
  if (s.spec) return s.spec;
  if (s.cron) return `${s.cron}${s.tz ? ` (${s.tz})` : ""}`;
  if (s.every_ms) return `every ${s.every_ms / 1000}s`;
  if (s.at) return `at ${s.at}`;
  return "";
}

async function loadSchedules() {
  let data;
  try {
    data = await api("GET", "/api/schedules");
  } catch (error) {
    if (error.status === 404) {
      $("schedules-empty").textContent = "This server has no schedules.";
      $("schedules-empty").hidden = false;
      return;
    }
    throw error;
  }
  const tbody = $("schedules-table").tBodies[0];
  clear(tbody);
  for (const s of data.schedules) {
    const ref = encodeURIComponent(s.name);
    const button = (label, action) => el("button", {
      type: "button", class: `action action-${action}`, "data-action": action,
      onclick: () => act("POST", `/api/schedules/${ref}/${action}`, action === "trigger" ? undefined : {},
        `${label}: ${s.name}`),
    }, label);
    const state = s.state || (s.paused ? "paused" : "active");
    const lastResult = s.last_outcome || "";
    const lastJob = s.last_job_id ?
      el("a", { href: `#/jobs/${encodeURIComponent(s.last_job_id)}`, text: lastResult || "running" }) :
      el("span", { class: "muted", text: lastResult || "—" });
    tbody.append(el("tr", { "data-name": s.name },
      el("td", {}, el("strong", { text: s.name }),
        s.owner ? el("span", { class: "muted", text: ` ${s.owner}` }) : null),
      el("td", { text: scheduleWhen(s) }),
      el("td", {}, statusBadge(state)),
      el("td", {}, s.next_run ? timeCell(s.next_run) : el("span", { class: "muted", text: "—" })),
      el("td", {}, s.last_run ? timeCell(s.last_run) : el("span", { class: "muted", text: "—" })),
      el("td", {}, lastJob),
      el("td", { text: s.jobs_started ?? "" }),
      el("td", {}, el("span", { class: "actions" },
        s.paused ? button("Resume", "resume") : button("Pause", "pause"),
        button("Trigger", "trigger")))));
  }
  $("schedules-empty").hidden = data.schedules.length > 0;
}

// ------------------------------------------------------------------ server summary

async function loadSummary() {
  try {
    const info = await api("GET", "/api/server");
    const counts = STATUS_ORDER.filter((s) => info.jobs[s]).map((s) => `${info.jobs[s]} ${s}`);
    $("server-summary").textContent = `v${info.version} · ${counts.join(" · ") || "no jobs"}` +
      (info.schedules ? ` · ${info.schedules} schedules` : "");
  } catch (e) { /* shown elsewhere */ }
}

// ------------------------------------------------------------------ routing

function stopTimer() { if (timer) { clearTimeout(timer); timer = null; } }

async function refresh() {
  if (needLogin || !view) return;
  stopTimer();
  const current = view;
  try {
    await current.load();
    if (view === current) loadSummary();
  } catch (error) {
    if (error.status === 401) return;
    if (view === current) flash(error.message, true);
  }
  if (view === current && !needLogin) timer = setTimeout(refresh, REFRESH_MS);
}

function route() {
  stopTimer();
  if (needLogin) return;
  const hash = location.hash || "#/";
  for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  let name;
  const match = hash.match(/^#\/jobs\/(.+)$/);
  if (match) {
    const id = decodeURIComponent(match[1]);
    $("job-progress").textContent = "";
    view = { load: () => loadJob(id) };
    name = "job";
  } else if (hash.startsWith("#/schedules")) {
    view = { load: loadSchedules };
    name = "schedules";
  } else {
    view = { load: loadJobs };
    name = "jobs";
  }
  $(`${name}-view`).hidden = false;
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === name || (name === "job" && link.dataset.nav === "jobs"));
  }
  refresh();
}

window.addEventListener("hashchange", route);
loadFilters();
route();
