// The buttons that change a job or a schedule. Each is bound, when drawn, to the id (or
// schedule name) of what its page or row shows, and to that page's context: a button of a
// page no longer shown does nothing. Cancel, delete and drop ask first; Rerun opens the
// new job's page.

import { el, user } from "./dom.js";

const FINAL = ["succeeded", "failed", "canceled"];
const LIVE = ["pending", "running", "paused"];

// Whether this tab's token may act: an admin's, or a server without tokens. Known once the
// header's summary came (/api/server names the token's principal); until then no buttons,
// so that a viewer never sees one.
let mayAct = null;

// The principal /api/server named (absent: a server without tokens); whether that changed
// what may be shown (the page is drawn again then).
export function setPrincipal(principal) {
  const now = !principal || principal.role === "admin";
  const changed = now !== mayAct;
  mayAct = now;
  return changed;
}

// What the buttons drawn now depend on besides the job or schedule: part of each page's
// signature for redrawing them.
export function accessKey() {
  return mayAct === true ? "act" : "read";
}

function noActions() {
  return el("span", { class: "actions" });
}

function button(label, action, title, onclick) {
  return el("button", {
    type: "button", class: `action action-${action}`, "data-action": action, title,
    onclick: (event) => {
      event.preventDefault();
      event.stopPropagation();
      onclick();
    },
  }, label);
}

function jobPath(id, action) {
  return `/api/jobs/${encodeURIComponent(id)}${action ? `/${action}` : ""}`;
}

// What a cancel did: {"count": N} or, with running jobs only asked to stop,
// {"count": N, "requested": M}.
function cancelOutcome(reply, name) {
  const requested = (reply && reply.requested) || 0;
  const count = (reply && reply.count) || 0;
  if (requested > 0) {
    return ["Cancel requested: ", user(name), " stops at its next progress report"];
  }
  return count > 0 ? ["Canceled: ", user(name)] : ["Nothing to cancel: ", user(name)];
}

// The buttons for `job` on the page of `ctx`; `compact`: a list row (no Delete).
export function jobActions(ctx, job, compact) {
  if (mayAct !== true) return noActions();
  const id = job.id;
  const name = job.name;
  const simple = async (action, label) => {
    try {
      await ctx.api("POST", jobPath(id, action), {});
      ctx.toast([`${label}: `, user(name)]);
      ctx.refresh();
    } catch (error) { ctx.fail(error); }
  };
  const cancel = async () => {
    try {
      const answer = await ctx.confirm({
        title: "Cancel this job?",
        message: ["Cancel job ", user(name, { class: "mono" }), " (", user(id, { class: "mono" }),
          ")? A running job is asked to stop; a canceled job does not run again."],
        action: "Cancel job", reason: true,
      });
      if (!answer) return;
      const reply = await ctx.api("POST", jobPath(id, "cancel"), { reason: answer.reason });
      ctx.toast(cancelOutcome(reply, name));
      ctx.refresh();
    } catch (error) { ctx.fail(error); }
  };
  const remove = async () => {
    try {
      const answer = await ctx.confirm({
        title: "Delete this job?",
        message: ["Delete job ", user(name, { class: "mono" }), " (", user(id, { class: "mono" }),
          ") with its payload and result? This cannot be undone."],
        action: "Delete job", reason: false,
      });
      if (!answer) return;
      await ctx.api("DELETE", jobPath(id));
      ctx.navigate("#/", ["Deleted job ", user(name), " (", user(id), ")"]);
    } catch (error) { ctx.fail(error); }
  };

  const rerun = async () => {
    try {
      const reply = await ctx.api("POST", jobPath(id, "rerun"), {});
      ctx.navigate(`#/jobs/${encodeURIComponent(reply.id)}`,
        ["Rerun of ", user(name), ": job ", user(reply.id, { class: "mono" })]);
    } catch (error) { ctx.fail(error); }
  };

  const buttons = [];
  if (job.status === "pending" || (job.status === "running" && !job.pause_requested)) {
    buttons.push(button("Pause", "pause", "Pause this job", () => simple("pause", "Paused")));
  }
  if (job.status === "paused" || job.pause_requested) {
    buttons.push(button("Resume", "resume", "Resume this job", () => simple("resume", "Resumed")));
  }
  if (LIVE.includes(job.status) && !job.cancel_requested) {
    buttons.push(button("Cancel", "cancel", "Cancel this job (asks first)", cancel));
  }
  if (!compact && FINAL.includes(job.status)) {
    buttons.push(button("Rerun", "rerun",
      "Submit a new job with this job's name, payload and options", rerun));
    buttons.push(button("Delete", "delete", "Delete this job (asks first)", remove));
  }
  return el("span", { class: "actions" }, ...buttons);
}

function schedulePath(ref, action) {
  return `/api/schedules/${encodeURIComponent(ref)}${action ? `/${action}` : ""}`;
}

// The buttons for schedule `s`; `full`: its own page (with Drop). They name it by id: the
// API reads a name of digits as an id, and an id is never given to another schedule.
export function scheduleActions(ctx, s, full) {
  if (mayAct !== true) return noActions();
  const name = s.name;
  const ref = String(s.id);
  const simple = async (action, label) => {
    try {
      await ctx.api("POST", schedulePath(ref, action), {});
      ctx.toast([`${label}: `, user(name)]);
      ctx.refresh();
    } catch (error) { ctx.fail(error); }
  };
  const trigger = async () => {
    try {
      const reply = await ctx.api("POST", schedulePath(ref, "trigger"));
      const link = el("a", { href: `#/jobs/${encodeURIComponent(reply.id)}` }, user(reply.id));
      ctx.toast(["Triggered ", user(name), ": job ", link]);
      ctx.refresh();
    } catch (error) { ctx.fail(error); }
  };
  const drop = async () => {
    try {
      const answer = await ctx.confirm({
        title: "Drop this schedule?",
        message: ["Drop schedule ", user(name, { class: "mono" }),
          "? It starts no more jobs; the jobs it started stay."],
        action: "Drop schedule", reason: true,
      });
      if (!answer) return;
      const query = answer.reason ? `?reason=${encodeURIComponent(answer.reason)}` : "";
      await ctx.api("DELETE", `${schedulePath(ref)}${query}`);
      ctx.navigate("#/schedules", ["Dropped schedule ", user(name)]);
    } catch (error) { ctx.fail(error); }
  };
  const buttons = [
    s.paused ? button("Resume", "resume", "Resume this schedule", () => simple("resume", "Resumed"))
      : button("Pause", "pause", "Pause this schedule", () => simple("pause", "Paused")),
    button("Trigger", "trigger", "Start one run now", trigger),
  ];
  if (full) buttons.push(button("Drop", "drop", "Drop this schedule (asks first)", drop));
  return el("span", { class: "actions" }, ...buttons);
}
