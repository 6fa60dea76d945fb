// The console: sign-in, the pages behind the header's links (hash routes), and leaving a
// page (its timers stopped).

import { call, signIn, signOut, signedInKey, ApiError } from "./api.js";
import { el, show } from "./dom.js";
import { overview } from "./overview.js";
import { decisions, decision } from "./decisions.js";
import { labelQueue } from "./label_queue.js";
import { taughtList, taughtPage } from "./taught.js";
import { batches, batchPage } from "./batches.js";

const ROUTES = [
  [/^#\/overview$/, overview],
  [/^#\/decisions$/, decisions],
  [/^#\/decisions\/([^/?]+)$/, decision],
  [/^#\/label(?:\?question=(.*))?$/, labelQueue],
  [/^#\/taught$/, taughtList],
  [/^#\/taught\/([^/?]+)$/, taughtPage],
  [/^#\/batches$/, batches],
  [/^#\/batches\/([^/?]+)$/, batchPage],
];

const page = document.getElementById("page");
let leaving = () => {};
let current = 0;  // the route in progress: an earlier one still loading must not show

async function route() {
  const mine = ++current;
  leaving();
  leaving = () => {};
  const hash = location.hash || "#/overview";
  for (const link of document.querySelectorAll("header nav a")) {
    link.toggleAttribute("aria-current", hash.startsWith(link.getAttribute("href")));
    if (link.hasAttribute("aria-current")) link.setAttribute("aria-current", "page");
  }
  if (!(await signedIn())) return;
  const found = ROUTES.find(([pattern]) => pattern.test(hash));
  if (!found) {
    show(page, el("p", { class: "error" }, `No page ${hash}.`));
    return;
  }
  const [pattern, render] = found;
  const parts = hash.match(pattern).slice(1).map(part => part && decodeURIComponent(part));
  const view = el("div");  // filled while it loads, shown once loaded if still wanted
  try {
    const leave = (await render(view, ...parts)) ?? (() => {});
    if (mine !== current) {
      leave();
      return;
    }
    leaving = leave;
    show(page, view);
  } catch (error) {
    if (mine !== current) return;
    if (error instanceof ApiError && error.status === 401 && signedInKey()) {
      signOut();  // the key was revoked meanwhile: sign in again
      route();
      return;
    }
    show(page, el("p", { class: "error", role: "alert" }, explain(error)));
  }
  page.focus();
}

export function explain(error) {
  if (error instanceof ApiError && error.status === 404) return `Not found: ${error.message}`;
  if (error instanceof ApiError) return `${error.status}: ${error.message}`;
  return String(error);
}

// Whether a key is signed in, or the service is open (keys off, loopback only); else the
// sign-in form.
async function signedIn() {
  document.getElementById("sign-out").hidden = !signedInKey();
  if (signedInKey() || document.body.dataset.keys === "off") return true;
  document.getElementById("sign-out").hidden = true;
  const key = el("input", { id: "key", name: "key", type: "password", autocomplete: "off",
                            required: true });
  const problem = el("p", { class: "error", role: "alert" });
  const form = el("form", {
    onsubmit: async event => {
      event.preventDefault();
      signIn(key.value.trim());
      try {
        await call("/v1/status");
        route();
      } catch (error) {
        signOut();
        problem.textContent = error instanceof ApiError && error.status === 401
          ? "That key was refused." : explain(error);
      }
    },
  }, el("h1", {}, "Sign in"),
     el("label", { for: "key" }, "API key "), key, " ",
     el("button", { type: "submit" }, "Sign in"), problem);
  show(page, form);
  key.focus();
  return false;
}

document.getElementById("sign-out").addEventListener("click", () => {
  signOut();
  location.hash = "#/overview";
  route();
});
window.addEventListener("hashchange", route);
route();
