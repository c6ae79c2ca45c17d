// A job's progress bar (percent and running status) and its status suffix (pausing,
// waiting for its dependencies, due in ...), on the list and on the job's page.

import { el, span, user } from "./dom.js";

// "due in 1m20s" for a pending job waiting for its time (this browser's clock), else "".
export function dueIn(job, now = Date.now()) {
  const due = job.due || job.time; // its time, or when its retry's backoff ends
  if (job.status !== "pending" || !due) return "";
  const ms = Date.parse(due) - now;
  return ms >= 500 ? `due in ${span(ms / 1000)}` : "";
}

// "waiting for 2 jobs" for a pending or paused job that waits for jobs it depends on, else "".
export function waitingFor(job) {
  const count = (job.waiting_for || []).length;
  if (!count || (job.status !== "pending" && job.status !== "paused")) return "";
  return `waiting for ${count} job${count === 1 ? "" : "s"}`;
}

export function statusSuffix(job) {
  if (job.cancel_requested && job.status === "running") return " (canceling)";
  if (job.pause_requested && job.status === "running") return " (pausing)";
  const waiting = waitingFor(job);
  if (waiting) return ` (${waiting})`;
  const due = dueIn(job);
  return due ? ` (${due})` : "";
}

export function progressBar(job) {
  const bar = el("div", {
    class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100,
    "aria-label": "progress",
  }, el("div", { class: "fill" }));
  const container = el("div", { class: "progress" }, bar,
    el("span", { class: "progress-text" }, el("span", { class: "percent" }), " ", user("")));
  updateProgress(container, job);
  return container;
}

export function updateProgress(container, job) {
  const bar = container.querySelector(".bar");
  const fraction = job.fraction_completed;
  const known = typeof fraction === "number";
  const percent = known ? Math.round(fraction * 1000) / 10 : 0;
  bar.className = `bar status-${job.status}`;
  bar.querySelector(".fill").style.width = `${percent}%`;
  if (known) bar.setAttribute("aria-valuenow", String(percent));
  else bar.removeAttribute("aria-valuenow");
  bar.setAttribute("data-progress", known ? String(fraction) : "");
  container.querySelector(".percent").textContent = known ? `${percent}%` : "";
  container.querySelector(".progress-text bdi").textContent = job.running_status || "";
}
