// Acting on many jobs at once from the job list (an admin's token only): a checkbox on
// each row, one in the header for the whole page, and a bar that offers "select all N
// matching" (every job the filter matches, on any page: the server selects them) and the
// actions. Each action asks first, saying how many jobs it changes (a dry run tells), and
// is one request: POST /api/jobs/bulk, one logged action on the server.

import { accessKey } from "./actions.js";
import { clear, el } from "./dom.js";
import { describe, selectionOf } from "./filters.js";

// [action, button label, past tense, what the question adds]
const ACTIONS = [
  ["pause", "Pause", "Paused", "Running jobs are asked to stop and pause when released."],
  ["resume", "Resume", "Resumed", ""],
  ["cancel", "Cancel", "Canceled", "Running jobs are asked to stop; canceled jobs do not " +
    "run again."],
  ["delete", "Delete", "Deleted", "Their payloads and results go too. This cannot be undone."],
  ["rerun", "Rerun", "Reran", "Each finished job is submitted again as a new job."],
];

// "Canceled 2 jobs; cancel requested for 1 running job"
function doneText(action, past, done) {
  const atOnce = done.count - done.requested;
  const parts = [];
  if (atOnce || !done.requested) parts.push(`${past} ${plural(atOnce, "job")}`);
  if (done.requested) parts.push(`${action} requested for ${plural(done.requested, "running job")}`);
  return parts.join("; ");
}

function plural(n, word) { return `${n.toLocaleString("en-US")} ${word}${n === 1 ? "" : "s"}`; }

// The selection model of one jobs page: ids checked on the page, or every job matching
// `filters()` (the filters shown now).
export function bulkSelection(ctx, filters) {
  const ids = new Set();
  let all = false;  // every job the filter matches (server-side)
  let matching = null;  // how many the filter matches, once asked
  let shown = [];  // the ids on the page now
  let more = false;  // the filter matches jobs on other pages too
  const headBox = el("input", { type: "checkbox", id: "select-page",
    "aria-label": "Select every job on this page" });
  const bar = el("div", { id: "bulk-bar", class: "bulk-bar", role: "region",
    "aria-label": "selected jobs", hidden: true });
  const boxes = new Map();  // id -> its row's checkbox

  const may = () => accessKey() === "act";

  function draw() {
    headBox.checked = shown.length > 0 && shown.every((id) => ids.has(id));
    headBox.indeterminate = !headBox.checked && shown.some((id) => ids.has(id));
    for (const [id, box] of boxes) box.checked = all || ids.has(id);
    bar.hidden = !may() || (!all && ids.size === 0);
    if (bar.hidden) delete bar.dataset.signature;
    // redrawn only when it changes (every load calls this): a click is never lost
    const signature = `${all}|${ids.size}|${matching}|${headBox.checked && more}`;
    if (bar.hidden || bar.dataset.signature === signature) return;
    bar.dataset.signature = signature;
    clear(bar);
    const text = el("span", { id: "bulk-count" });
    if (all) {
      text.append(`All ${plural(matching, "job")} matching the filter are selected.`);
    } else {
      text.append(`${plural(ids.size, "job")} selected.`);
    }
    bar.append(text);
    if (!all && headBox.checked && more && matching !== null) {
      bar.append(el("button", { type: "button", id: "select-all-matching",
        onclick: () => { all = true; draw(); } },
        `Select all ${plural(matching, "job")} matching`));
    }
    bar.append(el("button", { type: "button", id: "bulk-clear", onclick: () => reset() },
      "Clear selection"));
    const buttons = el("span", { class: "actions" }, ...ACTIONS.map(([action, label]) =>
      el("button", { type: "button", class: `action action-${action}`, "data-bulk": action,
        onclick: () => act(action) }, label)));
    bar.append(buttons);
  }

  function reset() { ids.clear(); all = false; matching = null; draw(); }

  // How many jobs the filter matches, for the "select all N matching" button.
  async function countMatching() {
    if (!may() || !more || matching !== null) return;
    try {
      const found = await ctx.api("POST", "/api/jobs/bulk",
        { action: "delete", selection: selectionOf(filters()), dry_run: true, limit: null });
      matching = found.matched;  // delete applies to every job: all that match
      draw();
    } catch (error) { ctx.fail(error); }
  }

  const selected = () => (all ? selectionOf(filters()) : { ids: [...ids] });

  // What `action` would do to the selection (a dry run).
  function preview(action) {
    return ctx.api("POST", "/api/jobs/bulk",
      { action, selection: selected(), dry_run: true, limit: null });
  }

  async function act(action) {
    const [, label, past, note] = ACTIONS.find(([a]) => a === action);
    try {
      const would = await preview(action);
      if (would.count === 0) {
        ctx.toast(`Nothing to ${action}: no selected job can be ${past.toLowerCase()}.`);
        return;
      }
      const which = all ? ` matching the filter${describe(filters()) ?
        ` (${describe(filters())})` : ""}` : "";
      const skipped = would.matched - would.count;
      const message = [`${label} ${plural(would.count, "job")}${which}?`,
        skipped ? ` ${plural(skipped, "other selected job")} cannot be ` +
          `${past.toLowerCase()} and stay as they are.` : "",
        note ? ` ${note}` : ""];
      const answer = await ctx.confirm({
        title: `${label} ${plural(would.count, "job")}?`, message,
        action: `${label} ${plural(would.count, "job")}`, reason: true,
      });
      if (!answer) return;
      // at most the jobs confirmed: a selection that grew meanwhile is refused, not acted on
      const done = await ctx.api("POST", "/api/jobs/bulk",
        { action, selection: selected(), limit: would.count, reason: answer.reason });
      ctx.toast(doneText(action, past, done));
      reset();
      ctx.refresh();
    } catch (error) { ctx.fail(error); }
  }

  headBox.addEventListener("change", () => {
    all = false;
    for (const id of shown) {
      if (headBox.checked) ids.add(id); else ids.delete(id);
    }
    draw();
    if (headBox.checked) countMatching();
  });

  return {
    headBox,
    bar,
    // The checkbox of the row showing job `job`.
    box(job) {
      const box = el("input", { type: "checkbox", class: "select-job",
        "aria-label": "Select this job", "data-id": job.id });
      box.addEventListener("change", () => {
        if (all) {  // unchecking one job of "all matching": the page's others stay checked
          all = false;
          shown.forEach((id) => ids.add(id));
        }
        if (box.checked) ids.add(job.id); else ids.delete(job.id);
        draw();
        if (headBox.checked) countMatching();
      });
      boxes.set(job.id, box);
      return box;
    },
    // After a load: the ids on the page, whether more match; checked ids gone from the
    // page are dropped (the list changed under them).
    update(pageIds, hasMore) {
      shown = pageIds;
      if (more !== hasMore) matching = null;
      more = hasMore;
      const here = new Set(pageIds);
      for (const id of [...ids]) if (!here.has(id)) ids.delete(id);
      for (const id of [...boxes.keys()]) if (!here.has(id)) boxes.delete(id);
      draw();
    },
    reset,
  };
}
