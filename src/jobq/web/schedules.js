// The schedules page: every schedule, when it runs (in words), its next run and last
// result. A schedule's own page is schedule.js.

import { scheduleActions } from "./actions.js";
import { cell, clear, el, statusBadge, timeCell, user } from "./dom.js";
import { state } from "./schedule.js";

function when(s) {
  if (s.description) return s.description;
  if (s.spec) return s.spec;
  if (s.cron) return `${s.cron}${s.tz ? ` (${s.tz})` : ""}`;
  if (s.every_ms) return `every ${s.every_ms / 1000}s`;
  if (s.at) return `at ${s.at}`;
  return "";
}

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
