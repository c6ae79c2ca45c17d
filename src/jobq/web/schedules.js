// The schedules page (every schedule, its next run and last result) and a schedule's own
// page (its settings and changes, with pause, resume, trigger and drop).

import { accessKey, scheduleActions } from "./actions.js";
import { cell, clear, el, notFound, statusBadge, timeCell, user } from "./dom.js";

function when(s) {
  if (s.spec) return s.spec;
  if (s.cron) return `${s.cron}${s.tz ? ` (${s.tz})` : ""}`;
  if (s.every_ms) return `every ${s.every_ms / 1000}s`;
  if (s.at) return `at ${s.at}`;
  return "";
}

function state(s) { return s.state || (s.paused ? "paused" : "active"); }

function lastResult(s) {
  const outcome = s.last_outcome || "";
  if (!s.last_job_id) return el("span", { class: "muted", text: outcome || "—" });
  return el("a", { href: `#/jobs/${encodeURIComponent(s.last_job_id)}`,
    text: outcome || "running" });
}

function scheduleLink(s) {
  // by id: the API reads a name of digits as an id
  return el("a", { href: `#/schedules/${encodeURIComponent(s.id)}` }, user(s.name));
}

export function mountSchedules(ctx, root) {
  const tbody = el("tbody");
  const empty = el("p", { id: "schedules-empty", class: "muted", hidden: true,
    text: "No schedules." });
  root.append(
    el("div", { class: "toolbar" }, el("h1", { text: "Schedules" })),
    el("div", { class: "table-box" },
      el("table", { id: "schedules-table", class: "list" },
        el("thead", {}, el("tr", {}, ...["Name", "When", "State", "Next run", "Last run",
          "Last result", "Runs", ""].map((h) => el("th", { text: h })))),
        tbody)),
    empty);
  return {
    async load() {
      let data;
      try {
        data = await ctx.api("GET", "/api/schedules");
      } catch (error) {
        if (error.status !== 404) throw error;
        empty.textContent = "This server has no schedules.";
        empty.hidden = false;
        return false;
      }
      clear(tbody);
      for (const s of data.schedules) {
        tbody.append(el("tr", { "data-name": s.name },
          cell("Name", { class: "col-name" }, scheduleLink(s),
            s.owner ? el("span", { class: "muted" }, " ", user(s.owner)) : null),
          cell("When", {}, user(when(s))),
          cell("State", {}, statusBadge(state(s))),
          cell("Next run", {}, timeCell(s.next_run)),
          cell("Last run", {}, timeCell(s.last_run)),
          cell("Last result", {}, lastResult(s)),
          cell("Runs", { text: s.jobs_started ?? "" }),
          cell("", { class: "col-actions" }, scheduleActions(ctx, s, false))));
      }
      empty.hidden = data.schedules.length > 0;
      return true;
    },
  };
}

const FIELDS = [
  ["name", "Name"], ["id", "ID"], ["owner", "Owner"], ["kind", "Kind"], ["spec", "When"],
  ["tz", "Time zone"], ["executor", "Executor"], ["wait", "Wait"], ["on_error", "On error"],
  ["catchup_ms", "Catch-up (ms)"], ["next_run", "Next run"], ["last_run", "Last run"],
  ["last_job_id", "Last job"], ["last_outcome", "Last result"], ["running", "Running"],
  ["jobs_started", "Jobs started"], ["skipped", "Skipped"], ["missed", "Missed"],
  ["consecutive_failures", "Failures in a row"], ["created", "Created"], ["reason", "Reason"],
];

function fieldValue(key, value) {
  if (value === null || value === undefined || value === "") return ["—"];
  if (key === "last_job_id") {
    return [el("a", { href: `#/jobs/${encodeURIComponent(value)}` }, user(value))];
  }
  if (["next_run", "last_run", "created"].includes(key)) {
    return [user(value), " ", el("span", { class: "muted" }, "(", timeCell(value), ")")];
  }
  return [user(String(value))];
}

export function mountSchedule(ctx, root, requested) {
  let shownId = null;  // the schedule's id once shown: a name of digits would read as an id
  const title = el("h1", { id: "schedule-title" });
  const badge = el("span", { id: "schedule-state", class: "status" });
  const actions = el("span", { id: "schedule-actions" });
  const fields = el("tbody");
  const args = el("pre", { id: "schedule-args", class: "user" });
  const changes = el("ol", { id: "schedule-changes", class: "timeline" });
  root.append(
    el("p", {}, el("a", { href: "#/schedules", text: "← Schedules" })),
    el("div", { class: "toolbar" }, title, badge, el("span", { class: "spacer" }), actions),
    el("div", { class: "columns" },
      el("div", {}, el("h2", { text: "Settings" }),
        el("table", { id: "schedule-fields", class: "fields" }, fields)),
      el("div", {}, el("h2", { text: "Job arguments" }), args,
        el("h2", { text: "Changes" }), changes)));

  function draw(s) {
    shownId = String(s.id);
    clear(title); title.append(user(s.name));
    badge.textContent = state(s);
    badge.className = `status status-${state(s)}`;
    const signature = `${s.id}|${s.paused}|${accessKey()}`;
    if (actions.dataset.signature !== signature) {
      actions.dataset.signature = signature;
      clear(actions); actions.append(scheduleActions(ctx, s, true));
    }
    clear(fields);
    for (const [key, label] of FIELDS) {
      fields.append(el("tr", {}, el("th", { text: label }),
        el("td", { "data-field": key }, ...fieldValue(key, s[key]))));
    }
    args.textContent = JSON.stringify(s.args ?? null, null, 2);
    clear(changes);
    for (const change of s.changes || []) {
      changes.append(el("li", {},
        el("time", { datetime: change.time || "", title: change.time || "",
          text: change.time || "" }),
        user(change.reason || "")));
    }
  }

  return {
    async load() {
      let s;
      try {
        s = await ctx.api("GET", `/api/schedules/${encodeURIComponent(shownId || requested)}`);
      } catch (e) {
        if (e.status === 404 || e.status === 400 || e.status === 422) {
          notFound(root, "schedule", requested, e,
            { href: "#/schedules", text: "← Schedules" });
          return false;
        }
        throw e;
      }
      draw(s);
      return true;
    },
  };
}
