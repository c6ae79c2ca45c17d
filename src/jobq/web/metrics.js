// The metrics page: /metrics (Prometheus text), fetched with the UI's token like every API
// call, shown with a filter, and offered as a file to save.

import { el } from "./dom.js";

export const METRICS_REFRESH_MS = 5000;

export function mountMetrics(ctx, root) {
  const filter = el("input", { id: "metrics-filter", placeholder: "jobq_jobs", maxlength: 200 });
  const text = el("pre", { id: "metrics-text", class: "metrics" });
  const save = el("a", { id: "metrics-save", download: "jobq-metrics.txt", href: "#",
    text: "Save as a file" });
  let last = "";
  let url = null;

  const show = () => {
    const wanted = filter.value.trim();
    text.textContent = wanted ?
      last.split("\n").filter((line) => line.includes(wanted)).join("\n") : last;
  };
  filter.addEventListener("input", show);

  root.append(
    el("div", { class: "toolbar" }, el("h1", { text: "Metrics" }),
      el("label", {}, "Filter ", filter), save),
    el("p", { class: "muted" }, "The server's ", el("code", { text: "/metrics" }),
      " in Prometheus' text format, refreshed every 5 s. Prometheus scrapes it with the ",
      "same token (", el("code", { text: "authorization: {credentials: <token>}" }), ")."),
    text);

  return {
    refreshMs: METRICS_REFRESH_MS,
    async load() {
      last = await ctx.apiText("/metrics");
      show();
      if (url) URL.revokeObjectURL(url);
      url = URL.createObjectURL(new Blob([last], { type: "text/plain" }));
      save.href = url;
      return true;
    },
    unmount() { if (url) URL.revokeObjectURL(url); },
  };
}
