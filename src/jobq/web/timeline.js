// A job's timeline (its history from the server): one row per event, except that
// consecutive checkpoint and progress events collapse into one row ("60 checkpoints,
// 02:40:01–02:41:00") that opens to show them. The page redraws every second: a row
// opened stays open, and nothing is redrawn while the events are the same.

import { clear, el, user } from "./dom.js";

// Events that come in runs while a job works.
const FREQUENT = new Set(["checkpoint", "progress"]);
// Shortest run that collapses.
const MIN_RUN = 2;

// [{event, time, ...}] -> [{single: event} | {run: [events], kind}]
export function groupEvents(events) {
  const groups = [];
  for (const event of events) {
    const last = groups[groups.length - 1];
    if (FREQUENT.has(event.event) && last && last.run && last.kind === event.event) {
      last.run.push(event);
    } else if (FREQUENT.has(event.event)) {
      groups.push({ run: [event], kind: event.event });
    } else {
      groups.push({ single: event });
    }
  }
  // a run of one is a plain row
  return groups.map((g) => (g.run && g.run.length < MIN_RUN ? { single: g.run[0] } : g));
}

// "02:40:01" of an RFC 3339 time (UTC, as the server gives it).
function clock(iso) { return iso ? String(iso).slice(11, 19) : ""; }

function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }

// "60 checkpoints, 02:40:01–02:41:00"
export function runSummary(run, kind) {
  const first = run[0].time;
  const last = run[run.length - 1].time;
  return `${plural(run.length, kind)}, ${clock(first)}–${clock(last)}`;
}

function eventRow(event) {
  return el("li", { class: `event event-${String(event.event).replace(/\W+/g, "-")}` },
    el("time", { datetime: event.time || "", title: event.time || "", text: event.time || "" }),
    el("strong", {}, user(event.event)),
    event.actor ? el("span", { class: "muted" }, " by ", user(event.actor)) : null,
    event.detail ? el("span", { class: "detail" }, " — ", user(event.detail)) : null);
}

// A timeline drawn into `list` (an <ol>); draw(events) again on each refresh.
export function timeline(list) {
  const opened = new Set();  // keys of the runs the user opened
  let signature = null;

  function runRow(group) {
    const key = `${group.kind}@${group.run[0].time}`;
    const details = el("details", { class: "event-run-details" },
      el("summary", { class: "event-run-summary" },
        el("strong", { text: runSummary(group.run, group.kind) }),
        el("span", { class: "muted", text: " (show)" })),
      el("ol", { class: "timeline nested" }, ...group.run.map(eventRow)));
    if (opened.has(key)) details.open = true;
    details.addEventListener("toggle", () => {
      if (details.open) opened.add(key); else opened.delete(key);
    });
    return el("li", { class: `event event-run event-run-${group.kind}`, "data-count":
      group.run.length }, details);
  }

  return {
    draw(events) {
      const next = JSON.stringify(events);
      if (next === signature) return;
      signature = next;
      clear(list);
      if (!events.length) {
        list.append(el("li", { class: "muted",
          text: "No history (an in-memory server keeps none)." }));
        return;
      }
      for (const group of groupEvents(events)) {
        list.append(group.single ? eventRow(group.single) : runRow(group));
      }
    },
  };
}
