// The jobs page: the list by status, filters kept in the URL (filters.js), pages of 200
// (the API's cursors), progress bars that follow heartbeats, an empty state that says why
// the list is empty, and for an admin checkboxes to act on many jobs at once (bulk.js). A
// pending job says when it is due, and its name is marked when no live worker serves it.

import { accessKey, jobActions } from "./actions.js";
import { bulkSelection } from "./bulk.js";
import { cell, clear, el, statusBadge, timeCell, user } from "./dom.js";
import { addParams, filterFields, isFiltered, readFilters, writeFilters } from "./filters.js";
import { progressBar, statusSuffix, updateProgress } from "./progress.js";

export const PAGE_SIZE = 200;
const PAGES_KEY = "jobq.pages";
// Works as printed in the repository after `make run` (tests/web run it).
export const SUBMIT_HINT =
  `.venv/bin/jobq submit demo.report --payload '{"table": ".jobq/demo/warehouse/sales.jsonl"}'`;

// ------------------------------------------------------------------ filters and pages

function loadState(key, fallback) {
  try {
    const value = JSON.parse(sessionStorage.getItem(key) || "null");
    return value === null ? fallback : value;
  } catch (e) { return fallback; }
}

// The filters (read from the URL when the page is drawn) and the cursors of the pages
// before the one shown (null: the first page).
const state = { filters: {}, cursors: loadState(PAGES_KEY, [null]) };
if (!Array.isArray(state.cursors) || !state.cursors.length) state.cursors = [null];

function save() {
  writeFilters(state.filters);
  sessionStorage.setItem(PAGES_KEY, JSON.stringify(state.cursors));
}

function filtered() { return isFiltered(state.filters); }

function query() {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  addParams(params, state.filters);
  const cursor = state.cursors[state.cursors.length - 1];
  if (cursor) params.set("cursor", cursor);
  return params.toString();
}

// ------------------------------------------------------------------ rows

function makeRow(job, bulk) {
  const row = el("tr", { "data-id": job.id });
  row.cells_ = {
    select: cell("Select", { class: "col-select" }, bulk.box(job)),
    status: cell("Status", { class: "col-status" }),
    name: cell("Name", { class: "col-name" }),
    description: cell("Description", { class: "col-description" }),
    progress: cell("Progress", { class: "col-progress" }, progressBar(job)),
    created: cell("Created", { class: "col-created" }),
    attempts: cell("Attempts", { class: "col-attempts" }),
    actions: cell("", { class: "col-actions" }),
  };
  row.append(...Object.values(row.cells_));
  return row;
}

// The mark after the name of a pending job that no live worker serves.
function noWorkerMark(name) {
  const text = `no live worker serves ${name}`;
  return el("span", { class: "no-worker", title: text, "aria-label": text, text: "⚠ no worker" });
}

function fillRow(ctx, row, job, unserved) {
  const c = row.cells_;
  row.dataset.status = job.status;
  clear(c.status); c.status.append(statusBadge(job.status, statusSuffix(job)));
  clear(c.name);
  c.name.append(el("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, user(job.name)));
  if (job.status === "pending" && unserved.has(job.name)) c.name.append(noWorkerMark(job.name));
  clear(c.description); c.description.append(user(job.description || ""));
  c.description.title = job.error || job.description || "";
  updateProgress(c.progress.firstChild, job);
  clear(c.created); c.created.append(timeCell(job.created));
  c.attempts.textContent = job.max_attempts ? `${job.attempts}/${job.max_attempts}` :
    String(job.attempts);
  const signature = `${job.status}|${job.pause_requested}|${job.cancel_requested}|${accessKey()}`;
  if (row.dataset.actions !== signature) {
    row.dataset.actions = signature;
    clear(c.actions); c.actions.append(jobActions(ctx, job, true));
  }
}

// ------------------------------------------------------------------ the page

function emptyKind() {
  if (state.cursors.length > 1) return "page";
  return filtered() ? "filter" : "none";
}

function emptyState(ctx, page, kind) {
  if (kind === "page") {
    return [el("p", { text: "No jobs on this page any more." }),
      el("button", { type: "button", onclick: () => { firstPage(); ctx.refresh(); } },
        "First page")];
  }
  if (kind === "filter") {
    return [el("p", { text: "No jobs match the filter." }),
      el("button", { type: "button", id: "clear-filter", onclick: () => page.clearFilters() },
        "Clear the filter")];
  }
  return [el("p", {}, "No jobs yet. Submit one from the repository, after ",
    el("code", { text: "make run" }), ":"),
    el("pre", { class: "hint" }, el("code", { id: "submit-hint", text: SUBMIT_HINT }))];
}

function firstPage() { state.cursors = [null]; save(); }

export function mountJobs(ctx, root) {
  state.filters = readFilters();
  const bulk = bulkSelection(ctx, () => state.filters);
  const fields = filterFields(state.filters, (filters) => {
    state.filters = filters;
    firstPage();
    bulk.reset();
    ctx.refresh();
  });
  const count = el("span", { id: "jobs-count", class: "muted" });
  const tbody = el("tbody");
  const empty = el("div", { id: "jobs-empty", class: "empty", hidden: true });
  const pager = {
    first: el("button", { type: "button", id: "jobs-first", text: "First page" }),
    previous: el("button", { type: "button", id: "jobs-previous", text: "← Previous" }),
    next: el("button", { type: "button", id: "jobs-next", text: `Next ${PAGE_SIZE} →` }),
  };
  const rows = new Map();
  let nextCursor = null;

  pager.first.addEventListener("click", () => { firstPage(); ctx.refresh(); });
  pager.previous.addEventListener("click", () => {
    if (state.cursors.length > 1) state.cursors.pop();
    save(); ctx.refresh();
  });
  pager.next.addEventListener("click", () => {
    if (nextCursor) state.cursors.push(nextCursor);
    save(); ctx.refresh();
  });

  const table = el("table", { id: "jobs-table", class: "list" },
    el("thead", {}, el("tr", {}, el("th", { class: "col-select" },
      el("label", {}, bulk.headBox, el("span", { class: "narrow-only", text: " All on this page" }))),
      ...["Status", "Name", "Description", "Progress", "Created", "Attempts", ""]
        .map((h) => el("th", { text: h })))),
    tbody);
  root.append(
    el("div", { class: "toolbar filters" }, el("h1", { text: "Jobs" }), ...fields.nodes, count),
    bulk.bar,
    el("div", { class: "table-box" }, table),
    empty,
    el("nav", { class: "pager", "aria-label": "pages" }, pager.first, pager.previous, pager.next));

  const page = {
    clearFilters() { fields.clear(); },
    async load() {
      let data;
      try {
        data = await ctx.api("GET", `/api/jobs?${query()}`);
      } catch (error) {
        if (error.status !== 400 || state.cursors.length < 2) throw error;
        firstPage();  // a cursor this server does not know (another server, a restart)
        return page.load();
      }
      const seen = new Set();
      const unserved = new Set(data.unserved || []);
      let previous = null;
      for (const job of data.jobs) {
        seen.add(job.id);
        let row = rows.get(job.id);
        if (!row) { row = makeRow(job, bulk); rows.set(job.id, row); }
        fillRow(ctx, row, job, unserved);
        const wanted = previous ? previous.nextSibling : tbody.firstChild;
        if (wanted !== row) tbody.insertBefore(row, wanted);
        previous = row;
      }
      for (const [id, row] of rows) {
        if (!seen.has(id)) { row.remove(); rows.delete(id); }
      }
      nextCursor = data.next_cursor || null;
      table.classList.toggle("selectable", accessKey() === "act");
      bulk.update(data.jobs.map((job) => job.id), Boolean(nextCursor) || state.cursors.length > 1);
      const index = state.cursors.length - 1;
      const first = index * PAGE_SIZE + 1;
      count.textContent = data.jobs.length === 0 ? "" :
        index > 0 || nextCursor ? `jobs ${first}–${first + data.jobs.length - 1}` +
          (nextCursor ? ", more on the next page" : "") :
          `${data.jobs.length} job${data.jobs.length === 1 ? "" : "s"}`;
      pager.first.hidden = index < 2;
      pager.previous.hidden = index < 1;
      pager.next.hidden = !nextCursor;
      const kind = data.jobs.length ? "" : emptyKind();
      if (empty.dataset.kind !== kind) {  // redrawn only when it changes: the hint stays selectable
        empty.dataset.kind = kind;
        clear(empty);
        if (kind) empty.append(...emptyState(ctx, page, kind));
      }
      empty.hidden = !kind;
      return true;
    },
  };
  return page;
}
