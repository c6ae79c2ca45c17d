// The Logs tab of a job's page: what each attempt of the job logged and printed. One
// button per attempt (the latest chosen until the user picks one); a running attempt's log
// is followed as it grows (GET /api/jobs/<id>/logs?follow=true, NDJSON over fetch, which
// can send the token; EventSource cannot), a finished one read once. The log's text enters
// the page only as text. The page's refresh tells it of the job (update); leaving the page
// stops the follow (stop).

import { apiStream } from "./api.js";
import { clear, el } from "./dom.js";

function logPath(id, attempt, offset, follow) {
  const query = `attempt=${attempt}&offset=${offset}${follow ? "&follow=true" : ""}`;
  return `/api/jobs/${encodeURIComponent(id)}/logs?${query}`;
}

function sizeText(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

// `details`: the page's other content, hidden while the Logs tab is shown; `showLogs`:
// whether the page opens on it (#/jobs/<id>/logs). Returns {tabs, panel, update, stop}.
export function mountLogs(ctx, details, showLogs) {
  const detailsTab = el("button", { type: "button", role: "tab", id: "job-tab-details",
    "aria-controls": "job-details", text: "Details" });
  const logsTab = el("button", { type: "button", role: "tab", id: "job-tab-logs",
    "aria-controls": "job-logs", text: "Logs" });
  const tabs = el("div", { class: "tabs", role: "tablist" }, detailsTab, logsTab);
  const attemptsBox = el("span", { id: "job-log-attempts", class: "attempts", role: "group",
    "aria-label": "attempt" });
  const state = el("span", { id: "job-log-state", class: "muted" });
  const text = el("pre", { id: "job-log", class: "log user", tabindex: "0" });
  const panel = el("div", { id: "job-logs", role: "tabpanel", hidden: true },
    el("div", { class: "toolbar" }, el("span", { class: "muted", text: "Attempt" }),
      attemptsBox, el("span", { class: "spacer" }), state),
    text);

  let job = null;        // the job as last drawn
  let shown = false;     // the Logs tab is shown
  let attempt = 0;       // the attempt shown (0: none yet)
  let pinned = false;    // the user chose it (else the latest is shown)
  let offset = 0;        // bytes of its log shown
  let cutShown = false;  // its cut marker is shown
  let reading = null;    // {controller, attempt} of the read or follow in progress
  let ended = false;     // the attempt shown is read to its end (nothing more will come)

  function select(tab) {
    shown = tab === "logs";
    detailsTab.setAttribute("aria-selected", String(!shown));
    logsTab.setAttribute("aria-selected", String(shown));
    details.hidden = shown;
    panel.hidden = !shown;
    if (job) {
      const hash = `#/jobs/${encodeURIComponent(job.id)}${shown ? "/logs" : ""}`;
      if (location.hash !== hash) history.replaceState(null, "", hash);
    }
    refresh();
  }
  detailsTab.addEventListener("click", () => select("details"));
  logsTab.addEventListener("click", () => select("logs"));

  function running(number) {
    return job && job.status === "running" && number === job.attempts;
  }

  function drawAttempts() {
    const count = job ? job.attempts : 0;
    if (attemptsBox.dataset.count === `${count}|${attempt}`) return;
    attemptsBox.dataset.count = `${count}|${attempt}`;
    clear(attemptsBox);
    for (let n = 1; n <= count; n++) {
      attemptsBox.append(el("button", {
        type: "button", class: "attempt", "data-attempt": n, "aria-pressed": String(n === attempt),
        text: String(n), onclick: () => { pinned = true; show(n); },
      }));
    }
  }

  function drawState(extra) {
    if (!job || !job.attempts) {
      state.textContent = "";
      return;
    }
    const where = `attempt ${attempt} of ${job.attempts} · ${sizeText(offset)}`;
    const doing = running(attempt) && !ended ? " · following" : "";
    state.textContent = where + doing + (extra ? ` · ${extra}` : "");
  }

  // Add a page of the log (a LogPage's JSON) for `number`.
  function add(page, number) {
    if (!ctx.alive || number !== attempt) return;
    const atBottom = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
    if (page.text) text.append(document.createTextNode(page.text));
    offset = page.next_offset;
    if (page.cut && !cutShown) {
      cutShown = true;
      text.append(el("span", { class: "log-cut", text: `${page.cut.marker}\n` }));
    }
    if (atBottom) text.scrollTop = text.scrollHeight;
    drawState();
  }

  function stopReading() {
    if (reading) reading.controller.abort();
    reading = null;
  }

  // Show attempt `number` from its start.
  function show(number) {
    stopReading();
    attempt = number;
    offset = 0;
    cutShown = false;
    ended = false;
    clear(text);
    drawAttempts();
    refresh();
  }

  // Read on in the attempt shown: follow it while it runs, else read what is left.
  async function readOn() {
    const number = attempt;
    const follow = running(number);
    const controller = new AbortController();
    reading = { controller, attempt: number };
    let over = !follow;  // the server said the attempt is over and read
    drawState();
    try {
      if (follow) {
        await apiStream(logPath(job.id, number, offset, true), controller.signal, (page) => {
          if (page.error) throw new Error(page.error);
          add(page, number);
          over = page.follow === "end";
        });
      } else {
        for (;;) {
          const page = await ctx.api("GET", logPath(job.id, number, offset, false));
          if (controller.signal.aborted) return;
          add(page, number);
          if (page.next_offset >= page.size) break;
        }
      }
      if (reading && reading.controller === controller) ended = over;
      if (!offset && !text.firstChild && number === attempt) {
        text.append(el("span", { class: "muted", text: "(nothing logged)" }));
      }
      drawState();
    } catch (error) {
      if (controller.signal.aborted || !ctx.alive) return;
      drawState(`stopped: ${error.message}`);
    } finally {
      if (reading && reading.controller === controller) reading = null;
    }
  }

  function refresh() {
    if (!shown || !job || !ctx.alive) return;
    if (!job.attempts) {
      clear(text);
      text.append(el("span", { class: "muted", text: "This job has not run yet." }));
      return;
    }
    if (!attempt) {
      show(job.attempts);
      return;
    }
    if (!reading && !ended) readOn();
    else if (!reading && running(attempt)) {
      ended = false;  // it runs again after a stop: follow from where it was
      readOn();
    }
    drawState();
  }

  return {
    tabs,
    panel,
    // The page drew `latest`: show its latest attempt unless the user chose one.
    update(latest) {
      const first = job === null;
      const grew = job !== null && latest.attempts !== job.attempts;
      job = latest;
      if (first) select(showLogs ? "logs" : "details");
      drawAttempts();
      if (grew && !pinned && latest.attempts) show(latest.attempts);
      else refresh();
    },
    stop() { stopReading(); },
  };
}
