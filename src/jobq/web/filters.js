// The job list's filters: the fields that show them, and the URL that keeps them (the hash's
// query: #/?status=failed&name=etl.*&text=disk), so that a reload, a bookmark or a link
// shows the same jobs. The URL is rewritten in place (no navigation) as they change.

import { el } from "./dom.js";

export const STATUSES = ["running", "pending", "paused", "failed", "canceled", "succeeded"];
const SAVED_KEY = "jobq.filters";

// [key, label, placeholder, input type]; the API's parameter of the same name
const FIELDS = [
  ["name", "Name", "name or etl.*", "text"],
  ["text", "Text", "in description or status", "search"],
  ["name_prefix", "Name prefix", "etl.", "text"],
  ["id_prefix", "ID", "hex digits", "text"],
  ["schedule", "Schedule", "name or id", "text"],
  ["worker", "Worker", "worker id", "text"],
  ["created_after", "Created from (UTC)", "", "datetime-local"],
  ["created_before", "Created before (UTC)", "", "datetime-local"],
];
export const KEYS = ["status", ...FIELDS.map(([key]) => key)];
// the fields shown at once; the others under "More filters"
const FIRST = ["name", "text"];

function empty() { return Object.fromEntries(KEYS.map((key) => [key, ""])); }

// The filters the URL holds; with no query, those this tab used last (saved), put in the URL.
export function readFilters() {
  const hash = location.hash || "#/";
  const at = hash.indexOf("?");
  if (at < 0) {
    let saved = {};
    try { saved = JSON.parse(sessionStorage.getItem(SAVED_KEY) || "{}") || {}; } catch (e) { /**/ }
    const filters = { ...empty(), ...pick(saved) };
    writeFilters(filters);
    return filters;
  }
  const params = new URLSearchParams(hash.slice(at + 1));
  return { ...empty(), ...pick(Object.fromEntries(params)) };
}

function pick(values) {
  const out = {};
  for (const key of KEYS) {
    if (typeof values[key] === "string") out[key] = values[key];
  }
  if (out.status && !STATUSES.includes(out.status)) out.status = "";
  return out;
}

// Keep `filters` in the URL (replacing the entry: no navigation, no new history step).
export function writeFilters(filters) {
  sessionStorage.setItem(SAVED_KEY, JSON.stringify(filters));
  const params = new URLSearchParams();
  for (const key of KEYS) {
    const value = (filters[key] || "").trim();
    if (value) params.set(key, value);
  }
  const query = params.toString();
  const hash = query ? `#/?${query}` : "#/";
  if (location.hash !== hash && !(hash === "#/" && !location.hash)) {
    history.replaceState(history.state, "", hash);
  }
}

export function isFiltered(filters) { return KEYS.some((key) => (filters[key] || "").trim()); }

// A datetime-local value ("2026-11-22T03:00") as RFC 3339 UTC.
function utc(value) { return value.length === 16 ? `${value}:00Z` : `${value}Z`; }

// The filters as the API's selection (GET /api/jobs parameters, a bulk action's selection);
// with none, every status (a bulk action needs at least one constraint).
export function selectionOf(filters) {
  const selection = {};
  for (const key of KEYS) {
    const value = (filters[key] || "").trim();
    if (!value) continue;
    if (key === "status") selection.status = [value];
    else if (key.startsWith("created_")) selection[key] = utc(value);
    else selection[key] = value;
  }
  if (!Object.keys(selection).length) selection.status = [...STATUSES];
  return selection;
}

// The filters as GET /api/jobs parameters.
export function addParams(params, filters) {
  for (const [key, value] of Object.entries(selectionOf(filters))) {
    if (key === "status" && value.length === STATUSES.length) continue;
    if (Array.isArray(value)) value.forEach((v) => params.append(key, v));
    else params.set(key, value);
  }
}

// The filters in words, for a confirmation ("status failed, name etl.*"); "" for none.
export function describe(filters) {
  const labels = { status: "status", ...Object.fromEntries(FIELDS.map(([k, l]) => [k, l])) };
  return KEYS.filter((key) => (filters[key] || "").trim())
    .map((key) => `${labels[key].toLowerCase()} ${filters[key].trim()}`).join(", ");
}

// The fields, filled from `filters`; onChange(newFilters) runs as the user edits them.
export function filterFields(filters, onChange) {
  const inputs = {};
  inputs.status = el("select", { id: "filter-status" },
    el("option", { value: "", text: "all" }),
    ...STATUSES.map((s) => el("option", { value: s, text: s })));
  for (const [key, , placeholder, type] of FIELDS) {
    inputs[key] = el("input", {
      id: `filter-${key.replace("_", "-")}`, type, placeholder, maxlength: 255,
      "aria-label": key.replace("_", " "),
    });
  }
  for (const key of KEYS) inputs[key].value = filters[key] || "";
  const current = () => Object.fromEntries(KEYS.map((key) => [key, inputs[key].value]));
  for (const key of KEYS) {
    inputs[key].addEventListener(key === "status" ? "change" : "input", () => onChange(current()));
  }
  const label = ([key, text]) => el("label", {}, `${text} `, inputs[key]);
  const more = FIELDS.filter(([key]) => !FIRST.includes(key));
  const details = el("details", { id: "more-filters", class: "more-filters" },
    el("summary", { text: "More filters" }), ...more.map(label));
  if (more.some(([key]) => filters[key])) details.open = true;
  return {
    nodes: [el("label", {}, "Status ", inputs.status),
      ...FIELDS.filter(([key]) => FIRST.includes(key)).map(label), details],
    clear() {
      for (const key of KEYS) inputs[key].value = "";
      onChange(current());
    },
  };
}
