// The workers page: every live worker (announced, heartbeating), what it serves, the jobs
// it runs now, how its jobs ended since it started, and when it was last heard of. A worker
// that stops cleanly leaves at once; one that dies leaves after a few missed heartbeats.

import { cell, clear, el, timeCell, user } from "./dom.js";

function outcomes(worker) {
  const counts = worker.outcomes || {};
  const parts = [`${counts.completed || 0} ok`, `${counts.failed || 0} failed`];
  for (const key of ["released", "lost"]) if (counts[key]) parts.push(`${counts[key]} ${key}`);
  return parts.join(", ");
}

function runningJobs(worker) {
  const jobs = worker.running || [];
  const shown = jobs.map((job) =>
    el("a", { href: `#/jobs/${encodeURIComponent(job.id)}`, class: "mono",
      title: job.name }, job.id.slice(0, 8)));
  const nodes = [el("span", { text: `${worker.running_count}/${worker.concurrency}` })];
  for (const link of shown) nodes.push(" ", link);
  if (worker.running_count > jobs.length) {
    nodes.push(el("span", { class: "muted", text: ` +${worker.running_count - jobs.length}` }));
  }
  return nodes;
}

function hostPid(worker) {
  return [user(worker.host || "?"), el("span", { class: "muted", text: ` pid ${worker.pid}` })];
}

export function mountWorkers(ctx, root) {
  const tbody = el("tbody");
  const count = el("span", { id: "workers-count", class: "muted" });
  const empty = el("div", { id: "workers-empty", class: "empty", hidden: true },
    el("p", {}, "No live workers. Start one with ",
      el("code", { text: "jobq worker --import MODULE" }),
      "; it shows here once it announced itself."));
  root.append(
    el("div", { class: "toolbar" }, el("h1", { text: "Workers" }), count),
    el("div", { class: "table-box" },
      el("table", { id: "workers-table", class: "list" },
        el("thead", {}, el("tr", {}, ...["Worker", "Host", "Serves", "Running", "Done",
          "Version", "Started", "Last seen"].map((h) => el("th", { text: h })))),
        tbody)),
    empty);
  return {
    async load() {
      const data = await ctx.api("GET", "/api/workers");
      clear(tbody);
      for (const w of data.workers) {
        tbody.append(el("tr", { "data-id": w.id },
          cell("Worker", { class: "col-name" }, user(w.id)),
          cell("Host", {}, ...hostPid(w)),
          cell("Serves", { class: "col-names" }, user(w.names.join(", "))),
          cell("Running", { class: "col-running" }, ...runningJobs(w)),
          cell("Done", { class: "col-outcomes", text: outcomes(w) }),
          cell("Version", {}, user(w.version || "")),
          cell("Started", {}, timeCell(w.started)),
          cell("Last seen", { class: "col-last-seen" }, timeCell(w.last_seen))));
      }
      const n = data.workers.length;
      count.textContent = n ? `${n} live worker${n === 1 ? "" : "s"}` : "";
      empty.hidden = n > 0;
      return true;
    },
  };
}
