// A schedule's own page: its spec in words, state and settings, its next 10 run times, its
// runs (the jobs it created, newest first, in pages, with status and duration) and its
// changes; pause, resume, trigger and drop for admins.

import { accessKey, scheduleActions } from "./actions.js";
import { cell, clear, el, notFound, statusBadge, timeCell, user } from "./dom.js";
import { statusSuffix } from "./progress.js";

export const RUNS_PAGE_SIZE = 20;
const NEXT_RUNS = 10;

const FIELDS = [
  ["name", "Name"], ["id", "ID"], ["owner", "Owner"], ["kind", "Kind"], ["spec", "Spec"],
  ["tz", "Time zone"], ["executor", "Executor"], ["wait", "Wait"], ["on_error", "On error"],
  ["catchup_ms", "Catch-up (ms)"], ["next_run", "Next run"], ["last_run", "Last run"],
  ["last_job_id", "Last job"], ["last_outcome", "Last result"],
  ["last_success", "Last success"], ["running", "Running"],
  ["jobs_started", "Jobs started"], ["skipped", "Skipped"], ["missed", "Missed"],
  ["consecutive_failures", "Failures in a row"], ["created", "Created"], ["reason", "Reason"],
];
const TIMES = ["next_run", "last_run", "last_success", "created"];

export function state(s) { return s.state || (s.paused ? "paused" : "active"); }

function fieldValue(key, value) {
  if (value === null || value === undefined || value === "") return ["—"];
  if (key === "last_job_id") {
    return [el("a", { href: `#/jobs/${encodeURIComponent(value)}` }, user(value))];
  }
  if (TIMES.includes(key)) {
    return [user(value), " ", el("span", { class: "muted" }, "(", timeCell(value), ")")];
  }
  return [user(String(value))];
}

// 850 -> "850ms", 65000 -> "1m 5s", 7322000 -> "2h 2m"
export function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${ms}ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(1).replace(/\.0$/, "")}s`;
  const parts = [[Math.floor(s / 86400), "d"], [Math.floor(s / 3600) % 24, "h"],
    [Math.floor(s / 60) % 60, "m"], [s % 60, "s"]].filter(([n]) => n > 0);
  return parts.slice(0, 2).map(([n, unit]) => `${n}${unit}`).join(" ");
}

// A run's job; a chain's later job says which job it runs after ("after 1a2b3c4d").
function runRow(run) {
  const kind = run.run_kind && run.run_kind !== "scheduled" ? run.run_kind : "";
  const after = (run.after || []).flatMap((id) => [" ",
    el("a", { href: `#/jobs/${encodeURIComponent(id)}`, class: "mono" }, id.slice(0, 8))]);
  return el("tr", { "data-id": run.id },
    cell("Job", { class: "mono" },
      el("a", { href: `#/jobs/${encodeURIComponent(run.id)}` }, run.id.slice(0, 8))),
    cell("Name", { class: "col-name" }, user(run.name),
      after.length ? el("span", { class: "muted run-after" }, " after", ...after) : null),
    cell("Status", {}, statusBadge(run.status, statusSuffix(run))),
    cell("Run for", { class: "col-run-for" }, run.run_for ? user(run.run_for) : "—",
      kind ? el("span", { class: "muted" }, ` (${kind})`) : null),
    cell("Started", {}, timeCell(run.started)),
    cell("Duration", { class: "col-duration", text: duration(run.duration_ms) }),
    cell("Attempts", { text: String(run.attempts) }));
}

export function mountSchedule(ctx, root, requested) {
  let shownId = null;  // the schedule's id once shown: a name of digits would read as an id
  const cursors = [null];  // the cursors of the runs' pages up to the one shown
  const title = el("h1", { id: "schedule-title" });
  const badge = el("span", { id: "schedule-state", class: "status" });
  const actions = el("span", { id: "schedule-actions" });
  const words = el("p", { id: "schedule-words", class: "schedule-words" });
  const fields = el("tbody");
  const args = el("pre", { id: "schedule-args", class: "user" });
  const nextRuns = el("ol", { id: "schedule-next-runs", class: "next-runs" });
  const runs = el("tbody");
  const runsEmpty = el("p", { id: "schedule-runs-empty", class: "muted", hidden: true,
    text: "No runs kept." });
  const newer = el("button", { id: "schedule-runs-newer", type: "button", text: "← Newer",
    onclick: () => { if (cursors.length > 1) { cursors.pop(); ctx.refresh(); } } });
  const older = el("button", { id: "schedule-runs-older", type: "button", text: "Older →" });
  const pageLabel = el("span", { id: "schedule-runs-page", class: "muted" });
  const changes = el("ol", { id: "schedule-changes", class: "timeline" });
  let nextCursor = null;
  older.addEventListener("click", () => {
    if (nextCursor) { cursors.push(nextCursor); ctx.refresh(); }
  });
  root.append(
    el("p", {}, el("a", { href: "#/schedules", text: "← Schedules" })),
    el("div", { class: "toolbar" }, title, badge, el("span", { class: "spacer" }), actions),
    words,
    el("div", { class: "columns" },
      el("div", {}, el("h2", { text: "Next runs" }), nextRuns,
        el("h2", { text: "Settings" }),
        el("table", { id: "schedule-fields", class: "fields" }, fields)),
      el("div", {}, el("h2", { text: "Runs" }),
        el("div", { class: "table-box" },
          el("table", { id: "schedule-runs", class: "list" },
            el("thead", {}, el("tr", {}, ...["Job", "Name", "Status", "Run for", "Started",
              "Duration", "Attempts"].map((h) => el("th", { text: h })))),
            runs)),
        runsEmpty,
        el("div", { class: "pager" }, newer, pageLabel, older),
        el("h2", { text: "Job arguments" }), args,
        el("h2", { text: "Changes" }), changes)));

  function draw(s, page) {
    shownId = String(s.id);
    clear(title); title.append(user(s.name));
    badge.textContent = state(s);
    badge.className = `status status-${state(s)}`;
    clear(words); words.append(user(s.description || s.spec || ""));
    const signature = `${s.id}|${s.paused}|${accessKey()}`;
    if (actions.dataset.signature !== signature) {
      actions.dataset.signature = signature;
      clear(actions); actions.append(scheduleActions(ctx, s, true));
    }
    clear(nextRuns);
    for (const time of s.next_runs || []) {
      nextRuns.append(el("li", {}, el("time", { datetime: time, text: time }), " ",
        el("span", { class: "muted" }, "(", timeCell(time), ")")));
    }
    if (!(s.next_runs || []).length) {
      nextRuns.append(el("li", { class: "muted", text: s.paused ? "None: paused." : "None." }));
    }
    clear(fields);
    for (const [key, label] of FIELDS) {
      fields.append(el("tr", {}, el("th", { text: label }),
        el("td", { "data-field": key }, ...fieldValue(key, s[key]))));
    }
    args.textContent = JSON.stringify(s.args ?? null, null, 2);
    clear(runs);
    for (const run of page.runs) runs.append(runRow(run));
    runsEmpty.hidden = page.runs.length > 0;
    nextCursor = page.next_cursor;
    newer.disabled = cursors.length <= 1;
    older.disabled = !nextCursor;
    pageLabel.textContent = `page ${cursors.length}`;
    clear(changes);
    for (const change of [...(s.changes || [])].reverse()) {
      changes.append(el("li", {},
        el("time", { datetime: change.time || "", title: change.time || "",
          text: change.time || "" }),
        user(change.reason || "")));
    }
  }

  return {
    async load() {
      const base = `/api/schedules/${encodeURIComponent(shownId || requested)}`;
      const params = new URLSearchParams({ limit: String(RUNS_PAGE_SIZE) });
      const cursor = cursors[cursors.length - 1];
      if (cursor) params.set("cursor", cursor);
      let s;
      let page;
      try {
        [s, page] = await Promise.all([
          ctx.api("GET", `${base}?next=${NEXT_RUNS}`),
          ctx.api("GET", `${base}/runs?${params}`),
        ]);
      } catch (e) {
        if (e.status === 404 || e.status === 400 || e.status === 422) {
          notFound(root, "schedule", requested, e,
            { href: "#/schedules", text: "← Schedules" });
          return false;
        }
        throw e;
      }
      draw(s, page);
      return true;
    },
  };
}
