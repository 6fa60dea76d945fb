// Batches: the key's batches with their progress; a new one from a CSV (a `state` column, and
// `custom_id` if it has one) or a JSONL file ({"custom_id"?, "state"} a line) of states with
// the questions given as JSON (POST /v1/batches); a batch's page followed until it is done,
// with its results as CSV (GET /v1/batches/{id}/results?format=csv).

import { call, listed, signedInKey } from "./api.js";
import { parseCsv } from "./csv.js";
import { el, show } from "./dom.js";

const REFRESH_MS = 2000;
const EXAMPLE_QUESTIONS = JSON.stringify({
  refund: { type: "noul", instructions: "Does the customer ask for a refund?" },
}, null, 2);

export async function batches(page) {
  const found = await listed("/v1/batches", 100);
  const questions = el("textarea", { id: "questions", name: "questions", rows: 6, cols: 60 });
  questions.value = EXAMPLE_QUESTIONS;
  const file = el("input", { id: "states", name: "states", type: "file",
                             accept: ".csv,.jsonl,.ndjson,text/csv" });
  const problem = el("p", { class: "error", role: "alert" });
  const form = el("form", { onsubmit: async event => {
    event.preventDefault();
    problem.textContent = "";
    try {
      if (!file.files.length) throw new Error("Choose a file of states.");
      const items = readItems(file.files[0].name, await file.files[0].text());
      const batch = await call("/v1/batches", { method: "POST", body: {
        questions: JSON.parse(questions.value), items } });
      location.hash = `#/batches/${batch.id}`;
    } catch (error) {
      problem.textContent = error.message;
    }
  } },
  el("h2", {}, "New batch"),
  el("p", {}, el("label", { for: "questions" }, "Questions (JSON, as in POST /v1/batches)")),
  questions,
  el("p", {}, el("label", { for: "states" }, "States: a CSV with a state column, or JSONL "),
     file),
  el("button", { type: "submit" }, "Send the batch"), problem);
  show(page, el("h1", {}, "Batches"),
       found.length ? el("table", {},
         el("thead", {}, el("tr", {}, ...["batch", "created", "status", "progress"]
           .map(name => el("th", { scope: "col" }, name)))),
         el("tbody", {}, found.map(batch => el("tr", {},
           el("td", {}, el("a", { href: `#/batches/${batch.id}` }, batch.id)),
           el("td", {}, new Date(batch.created_at).toLocaleString()),
           el("td", {}, batch.status),
           el("td", {}, progress(batch))))))
         : el("p", {}, "No batch yet."),
       form);
}

// The items of POST /v1/batches from a file's text: JSONL by its name, else CSV.
export function readItems(name, text) {
  const rows = /\.(jsonl|ndjson)$/i.test(name)
    ? text.split(/\r?\n/).filter(line => line.trim()).map(line => JSON.parse(line))
    : tableRows(parseCsv(text));
  return rows.map((row, index) => {
    if (typeof row.state !== "string" && typeof row.state !== "object") {
      throw new Error(`line ${index + 1}: no state`);
    }
    return { custom_id: String(row.custom_id ?? index + 1), state: row.state };
  });
}

function tableRows(table) {
  const [header, ...rows] = table;
  if (!header?.includes("state")) throw new Error("the CSV needs a state column");
  return rows.filter(row => row.some(cell => cell !== ""))
    .map(row => Object.fromEntries(header.map((name, column) => [name, row[column] ?? ""])));
}

function progress(batch) {
  const counts = batch.request_counts;
  const done = counts.succeeded + counts.failed + counts.cancelled;
  return el("span", {}, el("progress", { max: counts.total, value: done,
                                         "aria-label": `${batch.id} progress` }),
            ` ${done} of ${counts.total}`);
}

export async function batchPage(page, id) {
  let timer = null;
  async function refresh() {
    const batch = await call(`/v1/batches/${encodeURIComponent(id)}`);
    const counts = batch.request_counts;
    const finished = !["in_progress", "cancelling"].includes(batch.status);
    show(page, el("h1", {}, `Batch ${batch.id}`),
         el("p", { id: "batch-status" }, `${batch.status}: ${counts.succeeded} succeeded, `
            + `${counts.failed} failed, ${counts.cancelled} cancelled, ${counts.queued} queued, `
            + `${counts.running} running of ${counts.total}`),
         progress(batch),
         el("p", {}, el("button", { type: "button", id: "download",
                                    onclick: () => download(batch.id) },
                        finished ? "Download the results (CSV)" : "Download the results so far (CSV)")));
    if (finished) clearInterval(timer);
  }
  await refresh();
  timer = setInterval(() => refresh().catch(() => clearInterval(timer)), REFRESH_MS);
  return () => clearInterval(timer);
}

async function download(id) {
  const response = await fetch(`/v1/batches/${encodeURIComponent(id)}/results?format=csv`, {
    headers: signedInKey() ? { Authorization: `Bearer ${signedInKey()}` } : {},
  });
  const link = el("a", { href: URL.createObjectURL(await response.blob()), download: `${id}.csv` });
  document.body.append(link);
  link.click();
  link.remove();
  URL.revokeObjectURL(link.href);
}
