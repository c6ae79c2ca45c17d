// The confirmation asked before an action that cannot be undone (cancel, delete, drop): an
// in-page <dialog> naming what it acts on, with an optional reason. Navigating away closes
// it unanswered.

import { $, clear, el } from "./dom.js";

let answer = null;  // resolves the open dialog's promise

// confirmAction({title, message: [text or nodes], action, reason}) -> {reason} or null
export function confirmAction({ title, message, action, reason }) {
  const dialog = $("confirm");
  closeConfirm();
  $("confirm-title").textContent = title;
  const body = $("confirm-message");
  clear(body);
  body.append(...message.map((part) =>
    (part instanceof Node ? part : document.createTextNode(part))));
  const reasonField = $("confirm-reason-field");
  const input = $("confirm-reason");
  reasonField.hidden = !reason;
  input.value = "";
  $("confirm-ok").textContent = action;
  dialog.returnValue = "";
  dialog.showModal();
  (reason ? input : $("confirm-cancel")).focus();
  return new Promise((resolve) => { answer = resolve; });
}

// Close the dialog, if open, with no confirmation.
export function closeConfirm() { finish(null); }

function finish(result) {
  const dialog = $("confirm");
  const resolve = answer;
  answer = null;
  if (dialog.open) dialog.close();
  if (resolve) resolve(result);
}

$("confirm-form").addEventListener("submit", (event) => {
  event.preventDefault();
  finish({ reason: $("confirm-reason").value.trim() });
});
$("confirm-cancel").addEventListener("click", () => finish(null));
// Escape closes it too (a close event of an earlier dialog finds this one open: ignored)
$("confirm").addEventListener("close", () => { if (!$("confirm").open) finish(null); });
