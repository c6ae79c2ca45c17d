// One shown page (one navigation). Its requests, toasts and confirmations go through its
// PageContext: once the user navigates away (or must sign in again) the context is dead,
// and whatever answers arrive for it are dropped instead of drawn on the page now shown.

import { api, apiText } from "./api.js";
import { confirmAction } from "./confirm.js";
import { toast } from "./dom.js";

// Thrown by a dead page's requests: nothing to show, nothing to report.
export class Stale extends Error {
  constructor() { super("stale page"); }
}

let generation = 0;
let pendingToast = null;

// Every context made before this call is dead.
export function invalidatePages() { return ++generation; }

// The toast a navigation carries to the next page (e.g. "Deleted job x"), once.
export function takePendingToast() {
  const parts = pendingToast;
  pendingToast = null;
  return parts;
}

export class PageContext {
  constructor(refresh) {
    this.generation = invalidatePages();
    this.refresh = refresh;  // reload the page now (after an action)
  }

  get alive() { return this.generation === generation; }

  check() { if (!this.alive) throw new Stale(); }

  async api(method, path, body) {
    try {
      const data = await api(method, path, body);
      this.check();
      return data;
    } catch (error) {
      this.check();
      throw error;
    }
  }

  async apiText(path) {
    try {
      const text = await apiText(path);
      this.check();
      return text;
    } catch (error) {
      this.check();
      throw error;
    }
  }

  toast(parts, isError) { if (this.alive) toast(parts, isError); }

  // Ask before acting; null when declined or when the page went away meanwhile.
  async confirm(options) {
    this.check();
    const answer = await confirmAction(options);
    return this.alive ? answer : null;
  }

  // Go to another page, showing `parts` there as a toast.
  navigate(hash, parts) {
    if (!this.alive) return;
    pendingToast = parts || null;
    if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
    else location.hash = hash;
  }

  // An action's error, shown as a toast unless the page went away or the UI asks for a token.
  fail(error) {
    if (error instanceof Stale || error.status === 401) return;
    this.toast(error.message, true);
  }
}
