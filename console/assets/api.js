// The public API as the console calls it: the signed-in key on every call, errors as thrown
// ApiErrors carrying the API's own message.

const KEY_ITEM = "decide.console.key";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function signedInKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

export function signIn(key) {
  sessionStorage.setItem(KEY_ITEM, key);
}

export function signOut() {
  sessionStorage.removeItem(KEY_ITEM);
}

// A route that answers lines of JSON (application/x-ndjson): each line's value.
export async function callLines(path) {
  const response = await fetch(path, { headers: signedInKey()
    ? { Authorization: `Bearer ${signedInKey()}` } : {} });
  if (!response.ok) throw new ApiError(response.status, `${response.status} from ${path}`);
  return (await response.text()).split("\n").filter(line => line.trim())
    .map(line => JSON.parse(line));
}

export async function call(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  const key = signedInKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const message = described(data?.detail) ?? `${response.status}`;
    throw new ApiError(response.status, message);
  }
  return data;
}

// Every page of a list endpoint (newest first), up to `most` entries.
export async function listed(path, most) {
  const found = [];
  let after = null;
  while (found.length < most) {
    const separator = path.includes("?") ? "&" : "?";
    const page = await call(`${path}${separator}limit=100${after ? `&after=${after}` : ""}`);
    found.push(...page.data);
    if (!page.has_more) break;
    after = page.after;
  }
  return found.slice(0, most);
}

// An error answer's detail as one line: its message, or a 422's fields, each with its place
// and what is wrong with it.
function described(detail) {
  if (!Array.isArray(detail)) return detail?.message;
  return detail.map(item => `${(item.loc ?? []).join(".")}: ${item.msg}`).join("; ");
}
