// The HTTP API, with the token the user gave (kept in this tab's sessionStorage). Every
// request, /metrics included, carries it as `Authorization: Bearer <token>`.

const TOKEN_KEY = "jobq.token";

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

let onUnauthorized = () => {};

// fn(message) runs when the server answers 401: the UI asks for the token.
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

export function setToken(token) { sessionStorage.setItem(TOKEN_KEY, token); }

async function request(method, path, body, accept, signal) {
  const headers = { "Accept": accept };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store", signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.ok) return response;
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  const message = (data && typeof data.error === "string" && data.error) ||
    response.statusText || `HTTP ${response.status}`;
  if (response.status === 401) onUnauthorized(token ? "That token was not accepted." : "");
  throw new ApiError(response.status, message);
}

// A JSON route: the parsed reply, or an ApiError carrying the status and the server's error.
export async function api(method, path, body) {
  const response = await request(method, path, body, "application/json");
  try { return await response.json(); } catch (e) { return null; }
}

// A text route (/metrics).
export async function apiText(path) {
  const response = await request("GET", path, undefined, "text/plain");
  return response.text();
}

// A streaming NDJSON route (a log's follow): calls onValue(value) for each line as it
// arrives, until the stream ends or `signal` aborts it.
export async function apiStream(path, signal, onValue) {
  const response = await request("GET", path, undefined, "application/x-ndjson", signal);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      if (line) onValue(JSON.parse(line));
    }
  }
}
