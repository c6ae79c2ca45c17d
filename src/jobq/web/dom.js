// DOM helpers shared by every view. Text from jobs and schedules enters the page only as
// text (textContent or text nodes, never markup), and inside a <bdi> wherever it sits
// beside other text, so bidi control characters in it (U+202E...) reorder nothing else.

export function $(id) { return document.getElementById(id); }

// el("a", {href, class, text, onclick}, ...children): children are nodes or text.
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Text that came from a user (a description, a status, a reason, a worker id...): isolated.
export function user(text, attrs) {
  return el("bdi", { ...(attrs || {}), text: text === null || text === undefined ? "" : text });
}

export function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

export function ago(iso) {
  if (!iso) return "";
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (!isFinite(seconds)) return iso;
  const abs = Math.abs(seconds);
  let text;
  if (abs < 60) text = `${Math.round(abs)}s`;
  else if (abs < 3600) text = `${Math.round(abs / 60)}m`;
  else if (abs < 86400) text = `${Math.round(abs / 3600)}h`;
  else text = `${Math.round(abs / 86400)}d`;
  return seconds >= 0 ? `${text} ago` : `in ${text}`;
}

// A length of time to the second, as the CLI prints it: 45s, 1m20s, 3h5m, 2d4h.
export function span(seconds) {
  const total = Math.max(0, Math.round(seconds));
  const days = Math.floor(total / 86400);
  const hours = Math.floor((total % 86400) / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const secs = total % 60;
  if (days) return hours ? `${days}d${hours}h` : `${days}d`;
  if (hours) return minutes ? `${hours}h${minutes}m` : `${hours}h`;
  if (minutes) return secs ? `${minutes}m${secs}s` : `${minutes}m`;
  return `${secs}s`;
}

export function timeCell(iso) {
  if (!iso) return el("span", { class: "muted", text: "—" });
  return el("time", { datetime: iso, title: iso, text: ago(iso) });
}

// One toast at a time, at the bottom of the page; the router hides it on navigation.
export function toast(parts, isError) {
  const node = $("toast");
  clear(node);
  for (const part of Array.isArray(parts) ? parts : [parts]) {
    node.append(part instanceof Node ? part : document.createTextNode(String(part)));
  }
  node.className = isError ? "toast error" : "toast";
  node.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { node.hidden = true; }, isError ? 8000 : 4000);
}

export function hideToast() {
  clearTimeout(toast.timer);
  const node = $("toast");
  node.hidden = true;
  clear(node);
}

// A table that reflows into cards on narrow screens: each cell carries its column's label.
export function cell(label, attrs, ...children) {
  return el("td", { ...(attrs || {}), "data-label": label }, ...children);
}

export function statusBadge(status, extra) {
  return el("span", { class: `status status-${status}`, text: status + (extra || "") });
}

// The "not found" page for `what` (job or schedule) `id`: a message and a way back.
export function notFound(root, what, id, error, back) {
  clear(root);
  root.append(el("div", { id: "not-found", class: "not-found" },
    el("h1", { text: `${what[0].toUpperCase()}${what.slice(1)} not found` }),
    el("p", {}, `This server has no ${what} `, user(id, { class: "mono" }),
      error.status === 400 ? ` (${error.message})` : "", "."),
    el("p", {}, el("a", { href: back.href, text: back.text }))));
}
