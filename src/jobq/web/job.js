// A job's page: its status, progress and error first (and the schedule run it is), then its
// fields, payload and result, and its timeline (timeline.js), and a Logs tab (logs.js). The
// page is drawn afresh for each navigation; its buttons act on the job it shows (the full id
// the server answered with), and an id that names no job shows "not found" and no buttons.

import { accessKey, jobActions } from "./actions.js";
import { ago, clear, el, notFound, user } from "./dom.js";
import { progressBar, statusSuffix, updateProgress } from "./progress.js";
import { Stale } from "./page.js";
import { timeline } from "./timeline.js";
import { mountLogs } from "./logs.js";

const FIELDS = [
  ["id", "ID"], ["name", "Name"], ["description", "Description"], ["status", "Status"],
  ["priority", "Priority"], ["attempts", "Attempts"], ["max_attempts", "Max attempts"],
  ["fails", "Fails"], ["max_fails", "Max fails"], ["ttr_ms", "TTR (ms)"], ["ttl_ms", "TTL (ms)"],
  ["retry_backoff", "Retry backoff"],
  ["created", "Created"], ["time", "Time"], ["due", "Due"], ["started", "Started"],
  ["modified", "Modified"], ["finished", "Finished"], ["running_status", "Running status"],
  ["lease", "Lease"], ["checkpoint_size", "Checkpoint size"], ["payload_size", "Payload size"],
  ["creator", "Creator"], ["created_by", "Created by"], ["run_for", "Run for"],
  ["run_kind", "Run kind"], ["reason", "Reason"], ["rerun_of", "Rerun of"], ["reruns", "Reruns"],
  ["after", "After"], ["dependents", "Needed by"],
];
const TIMES = ["created", "time", "due", "started", "modified", "finished", "run_for"];

// A duration in ms as "5m", "1s", "1500ms".
function duration(ms) {
  for (const [unit, size] of [["h", 3600000], ["m", 60000], ["s", 1000]]) {
    if (ms && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

function jobLink(id) {
  return el("a", { href: `#/jobs/${encodeURIComponent(id)}`, class: "mono" }, user(id));
}

function decodeBase64(text) {
  const binary = atob(text || "");
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

// Bytes as text (pretty JSON when it parses) or as a hex dump.
export function preview(base64, limit) {
  if (base64 === null || base64 === undefined) return { kind: "", text: "" };
  const bytes = decodeBase64(base64);
  if (bytes.length === 0) return { kind: "(empty)", text: "" };
  const shown = bytes.subarray(0, limit);
  const more = bytes.length > limit ? `\n… ${bytes.length - limit} more bytes` : "";
  try {
    // cut inside a character, the shown bytes end in part of one: left out, not an error
    const cut = bytes.length > limit;
    const text = new TextDecoder("utf-8", { fatal: true }).decode(shown, { stream: cut });
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

// A field's value as nodes: user text isolated, times with how long ago.
function fieldValue(key, value) {
  if (value === null || value === undefined || value === "") return ["—"];
  if (TIMES.includes(key)) {
    return [user(value), " ", el("span", { class: "muted", text: `(${ago(value)})` })];
  }
  if (key === "lease") return [user(value.worker_id || "?"), " until ", user(value.expires || "?")];
  if (key === "created_by" && value.type === "schedule") {
    return [el("a", { href: `#/schedules/${encodeURIComponent(value.id)}` },
      "schedule ", user(value.id))];
  }
  if (key === "created_by") return [user(value.type), " ", user(value.id)];
  if (key === "retry_backoff") {
    if (!value.initial_ms) return ["at once"];
    const { initial_ms: initial, multiplier, max_ms: most } = value;
    return [`${duration(initial)}, x${multiplier}, at most ${duration(most)}`];
  }
  if (key === "rerun_of") return [jobLink(value)];
  if (key === "after" || key === "dependents") {
    if (!value.length) return ["—"];
    return value.flatMap((id, i) => (i ? [", ", jobLink(id)] : [jobLink(id)]));
  }
  if (key === "reruns") {
    if (!value.length) return ["—"];
    return value.flatMap((id, i) => (i ? [", ", jobLink(id)] : [jobLink(id)]));
  }
  if (key === "checkpoint_size" || key === "payload_size") return [`${value} bytes`];
  return [user(String(value))];
}

// The jobs it runs after, linked, each it still waits for marked "(waiting)"; then
// "(after any outcome)" when it runs whatever theirs.
function afterValue(job) {
  const after = job.after || [];
  if (!after.length) return ["—"];
  const waiting = new Set(job.waiting_for || []);
  const nodes = after.flatMap((id, i) => [
    ...(i ? [", "] : []), jobLink(id),
    ...(waiting.has(id) ? [el("span", { class: "muted waiting", text: " (waiting)" })] : []),
  ]);
  if (job.after_any) nodes.push(el("span", { class: "muted", text: " (after any outcome)" }));
  return nodes;
}

export function mountJob(ctx, root, path) {
  // #/jobs/<id>/logs opens the Logs tab (logs.js)
  const [requested, tab] = path.split("/");
  let shownId = null;  // the full id, once the server named the job
  const title = el("h1", { id: "job-title" });
  const status = el("span", { id: "job-status", class: "status" });
  const actions = el("span", { id: "job-actions" });
  const progress = el("div", { id: "job-progress" });
  const fields = el("tbody");
  const error = el("pre", { id: "job-error", class: "error-box user" });
  const payloadKind = el("span", { id: "job-payload-kind", class: "muted" });
  const payload = el("pre", { id: "job-payload", class: "user" });
  const resultKind = el("span", { id: "job-result-kind", class: "muted" });
  const result = el("pre", { id: "job-result", class: "user" });
  const errorBox = el("div", { id: "job-error-box", hidden: true },
    el("h2", { text: "Error" }), error);
  const scheduleRun = el("p", { id: "job-schedule", class: "schedule-run", hidden: true });
  const history = el("ol", { id: "job-history", class: "timeline" });
  const timelineView = timeline(history);
  const details = el("div", { id: "job-details", role: "tabpanel" },
    el("div", { class: "columns" },
      el("div", {}, el("h2", { text: "Fields" }),
        el("table", { id: "job-fields", class: "fields" }, fields)),
      el("div", {},
        el("h2", {}, "Payload ", payloadKind), payload,
        el("h2", {}, "Result ", resultKind), result)),
    el("h2", { text: "History" }), history);
  const logs = mountLogs(ctx, details, tab === "logs");
  root.append(
    el("p", {}, el("a", { href: "#/", text: "← Jobs" })),
    el("div", { class: "toolbar" }, title, status, el("span", { class: "spacer" }), actions),
    progress,
    errorBox,
    scheduleRun,
    logs.tabs, details, logs.panel);

  // "Run of schedule nightly for 2026-11-26T02:30:00Z (backfill)", linked to the schedule
  function drawScheduleRun(job) {
    const by = job.created_by;
    if (!by || by.type !== "schedule") { scheduleRun.hidden = true; return; }
    const name = job.schedule ? job.schedule.name : `#${by.id}`;
    const signature = `${name}|${by.id}|${job.run_for}|${job.run_kind}`;
    scheduleRun.hidden = false;
    if (scheduleRun.dataset.signature === signature) return;
    scheduleRun.dataset.signature = signature;
    clear(scheduleRun);
    scheduleRun.append("Run of schedule ",
      el("a", { id: "job-schedule-link", href: `#/schedules/${encodeURIComponent(by.id)}` },
        user(name)),
      job.run_for ? " for " : "", job.run_for ? user(job.run_for) : "",
      job.run_kind && job.run_kind !== "scheduled" ? ` (${job.run_kind})` : "",
      job.schedule ? "" : " (the schedule is gone)");
  }

  function draw(job, events) {
    shownId = job.id;
    clear(title); title.append(user(job.name));
    status.textContent = job.status + statusSuffix(job);
    status.className = `status status-${job.status}`;
    const signature =
      `${job.id}|${job.status}|${job.pause_requested}|${job.cancel_requested}|${accessKey()}`;
    if (actions.dataset.signature !== signature) {
      actions.dataset.signature = signature;
      clear(actions); actions.append(jobActions(ctx, job, false));
    }
    if (!progress.firstChild) progress.append(progressBar(job));
    updateProgress(progress.firstChild, job);
    clear(fields);
    for (const [key, label] of FIELDS) {
      const value = key === "after" ? afterValue(job) : fieldValue(key, job[key]);
      fields.append(el("tr", {}, el("th", { text: label }),
        el("td", { "data-field": key }, ...value)));
    }
    error.textContent = job.error || "";
    errorBox.hidden = !job.error;
    drawScheduleRun(job);
    const shownPayload = preview(job.payload, 4096);
    payloadKind.textContent = shownPayload.kind;
    payload.textContent = shownPayload.text;
    const shownResult = preview(job.result, 4096);
    resultKind.textContent = shownResult.kind;
    result.textContent = job.result === null || job.result === undefined ? "—" : shownResult.text;
    timelineView.draw(events);
    logs.update(job);
  }

  return {
    async load() {
      const path = `/api/jobs/${encodeURIComponent(shownId || requested)}`;
      let job;
      let events;
      try {
        [job, events] = await Promise.all([
          ctx.api("GET", path),
          ctx.api("GET", `${path}/history`).then((h) => h.events, (e) => {
            if (e.status === 401 || e instanceof Stale) throw e;
            return [];
          }),
        ]);
      } catch (e) {
        if (e.status === 404 || e.status === 400) {
          notFound(root, "job", shownId || requested, e, { href: "#/", text: "← Jobs" });
          return false;  // nothing to refresh
        }
        throw e;
      }
      draw(job, events);
      return true;
    },
    unmount() { logs.stop(); },
  };
}
