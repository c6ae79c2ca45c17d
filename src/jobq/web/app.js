// jobq's web UI: plain JavaScript modules, no build step. This module routes: each
// navigation (a change of the #hash) draws its page afresh into an emptied <main> section,
// with a new PageContext (page.js) so that nothing of the page before (fields, buttons,
// toasts, a confirmation, answers still on their way) can act or show on the new one.
//
// Pages: #/ jobs (jobs.js), #/jobs/<id> a job (job.js), #/schedules (schedules.js),
// #/schedules/<id or name> a schedule (schedule.js), #/workers (workers.js), #/metrics
// (metrics.js).

import { setPrincipal } from "./actions.js";
import { setToken, setUnauthorizedHandler } from "./api.js";
import { closeConfirm } from "./confirm.js";
import { $, clear, hideToast, toast } from "./dom.js";
import { mountJob } from "./job.js";
import { mountJobs } from "./jobs.js";
import { mountMetrics } from "./metrics.js";
import { invalidatePages, PageContext, Stale, takePendingToast } from "./page.js";
import { mountSchedule } from "./schedule.js";
import { mountSchedules } from "./schedules.js";
import { mountWorkers } from "./workers.js";

const REFRESH_MS = 1000;
const STATUS_ORDER = ["running", "pending", "paused", "failed", "canceled", "succeeded"];

// [pattern, section, nav link, mount(ctx, root, ...groups)]
const ROUTES = [
  [/^#\/jobs\/(.+)$/, "job", "jobs", mountJob],
  [/^#\/schedules\/(.+)$/, "schedule", "schedules", mountSchedule],
  [/^#\/schedules\/?$/, "schedules", "schedules", mountSchedules],
  [/^#\/workers\/?$/, "workers", "workers", mountWorkers],
  [/^#\/metrics\/?$/, "metrics", "metrics", mountMetrics],
  [/^/, "jobs", "jobs", mountJobs],
];

let shown = null;  // {ctx, page, timer, loading, again}
let needLogin = false;

// ------------------------------------------------------------------ signing in

function showLogin(message) {
  needLogin = true;
  leave();
  for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("login-token").focus();
}

setUnauthorizedHandler(showLogin);

// What the server takes as a token (docs/http.md, Security). Another character (a pasted
// zero-width space...) could not even be sent: fetch refuses such a header, and the tab,
// keeping the token, would fail every request with no way back to this form.
const TOKEN_PATTERN = /^[!-~]{1,4096}$/;

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("login-token").value.trim();
  if (!TOKEN_PATTERN.test(token)) {
    $("login-error").textContent =
      "A token is 1 to 4096 printable ASCII characters, with no spaces.";
    return;
  }
  setToken(token);
  $("login-token").value = "";
  needLogin = false;
  route();
});

// ------------------------------------------------------------------ the page shown

// Stop the shown page: its timer, its dialog, its toast; its context dies.
function leave() {
  if (shown) {
    clearTimeout(shown.timer);
    if (shown.page.unmount) shown.page.unmount();
    shown = null;
  }
  invalidatePages();
  closeConfirm();
  hideToast();
}

// Load the shown page, then again every refreshMs; one load at a time, in order.
async function tick(entry) {
  if (entry !== shown || !entry.ctx.alive) return;
  if (entry.loading) { entry.again = true; return; }
  clearTimeout(entry.timer);
  entry.loading = true;
  let keep = true;
  try {
    keep = (await entry.page.load()) !== false;
    if (entry.ctx.alive) loadSummary(entry);
  } catch (error) {
    if (error instanceof Stale) return;
    entry.ctx.fail(error);
  } finally {
    entry.loading = false;
  }
  if (entry !== shown || !entry.ctx.alive || needLogin) return;
  if (entry.again) {
    entry.again = false;
    tick(entry);
  } else if (keep) {
    entry.timer = setTimeout(() => tick(entry), entry.page.refreshMs || REFRESH_MS);
  }
}

function route() {
  leave();
  if (needLogin) return;
  const hash = location.hash || "#/";
  const [pattern, name, nav, mount] = ROUTES.find(([p]) => p.test(hash));
  const groups = hash.match(pattern).slice(1).map((g) => {
    try { return decodeURIComponent(g); } catch (e) { return g; }
  });
  for (const section of document.querySelectorAll("main > section")) {
    section.hidden = true;
    if (section.id !== "login") clear(section);
  }
  const root = $(`${name}-view`);
  const entry = { timer: null, loading: false, again: false };
  entry.ctx = new PageContext(() => tick(entry));
  entry.page = mount(entry.ctx, root, ...groups);
  shown = entry;
  root.hidden = false;
  for (const link of document.querySelectorAll("[data-nav]")) {
    const active = link.dataset.nav === nav;
    link.classList.toggle("active", active);
    if (active) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const carried = takePendingToast();
  if (carried) toast(carried);
  tick(entry);
}

// ------------------------------------------------------------------ the header's summary

// The header's line; whose token this tab uses decides which buttons pages show (a page is
// drawn again when that changes).
async function loadSummary(entry) {
  try {
    const info = await entry.ctx.api("GET", "/api/server");
    const counts = STATUS_ORDER.filter((s) => info.jobs[s]).map((s) => `${info.jobs[s]} ${s}`);
    const who = info.principal ? ` · ${info.principal.name} (${info.principal.role})` : "";
    $("server-summary").textContent = `v${info.version} · ${counts.join(" · ") || "no jobs"}` +
      (info.schedules ? ` · ${info.schedules} schedules` : "") + who;
    if (setPrincipal(info.principal)) tick(entry);
  } catch (e) { /* the page shows its own errors */ }
}

window.addEventListener("hashchange", route);
route();
