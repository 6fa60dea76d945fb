// Decisions: the key's recent jobs, filtered by status (the API's filter), question,
// confidence and time (on the page's rows); a decision's page with its state, every
// probability as bars, and its labels.

import { call } from "./api.js";
import { bars, certainty, labelName, percent, pick } from "./answers.js";
import { el, show } from "./dom.js";

const PAGE = 50;

export async function decisions(page) {
  const filters = { status: "", question: "", taught: "", low: 0, high: 1, since: "" };
  const everyone = (await call("/v1/status")).scope === "all";  // an admin key: every key's
  let after = null;
  let cursors = [];
  async function load() {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (filters.status) query.set("status", filters.status);
    if (after) query.set("after", after);
    if (everyone) query.set("scope", "all");
    const listed = await call(`/v1/jobs?${query}`);
    const rows = listed.data.filter(job => matches(job, filters));
    show(page, el("h1", {}, "Decisions"),
         el("p", { class: "muted" }, everyone ? "Every key's decisions." : "Your key's decisions."),
         form(filters, () => { after = null; cursors = []; load(); }),
         table(rows, everyone),
         el("p", {},
           cursors.length ? el("button", { type: "button", onclick: () => {
             after = cursors.pop() ?? null; load(); } }, "Newer") : null, " ",
           listed.has_more ? el("button", { type: "button", onclick: () => {
             cursors.push(after); after = listed.after; load(); } }, "Older") : null),
         el("p", { class: "muted" }, `${rows.length} of ${listed.data.length} on this page.`));
  }
  await load();
}

function matches(job, filters) {
  const answers = Object.entries(job.result?.answers ?? {});
  const wanted = filters.question ? answers.filter(([key]) => key === filters.question)
                                  : answers;
  if (filters.question && !wanted.length) return false;
  if ((filters.low > 0 || filters.high < 1) && !wanted.some(([, answer]) =>
    certainty(answer) >= filters.low && certainty(answer) <= filters.high)) return false;
  if (filters.since && new Date(job.created_at) < new Date(filters.since)) return false;
  if (filters.taught && (filters.taught === "taught") !== taught(job)) return false;
  return true;
}

function form(filters, apply) {
  const field = (label, input) => el("label", {}, label, input);
  const input = (name, attributes) => el("input", {
    name, value: filters[name], ...attributes,
    onchange: event => { filters[name] = event.target.type === "number"
      ? Number(event.target.value) : event.target.value; apply(); },
  });
  const status = el("select", { name: "status", onchange: event => {
    filters.status = event.target.value; apply(); } },
    ...["", "queued", "running", "succeeded", "failed", "cancelled", "expired"].map(value =>
      el("option", { value, selected: value === filters.status }, value || "any")));
  const readout = el("select", { name: "taught", onchange: event => {
    filters.taught = event.target.value; apply(); } },
    ...[["", "either"], ["taught", "taught"], ["zero-shot", "zero-shot"]].map(([value, name]) =>
      el("option", { value, selected: value === filters.taught }, name)));
  return el("div", { class: "filters", role: "search" },
    field("status", status),
    field("answered", readout),
    field("question", input("question", { placeholder: "question key" })),
    field("surest answer at least", input("low", { type: "number", min: 0, max: 1, step: 0.05 })),
    field("at most", input("high", { type: "number", min: 0, max: 1, step: 0.05 })),
    field("since", input("since", { type: "datetime-local" })));
}

function table(jobs, everyone) {
  const columns = ["decision", ...(everyone ? ["asked by"] : []), "asked", "status", "taught",
                   "answers"];
  return el("table", {},
    el("thead", {}, el("tr", {}, ...columns.map(name => el("th", { scope: "col" }, name)))),
    el("tbody", {}, jobs.map(job => el("tr", {},
      el("td", {}, el("a", { href: `#/decisions/${job.id}` }, job.id)),
      everyone ? el("td", {}, job.x_owner) : null,
      el("td", {}, new Date(job.created_at).toLocaleString()),
      el("td", {}, job.status),
      el("td", {}, taught(job) ? "taught" : "zero-shot"),
      el("td", {}, Object.entries(job.result?.answers ?? {}).map(([key, answer]) =>
        `${key}: ${pick(answer)} (${percent(certainty(answer))})`).join(", "))))));
}

function taught(job) {
  return Object.values(job.result?.answers ?? {}).some(answer => answer.x_taught);
}

export async function decision(page, id) {
  const [job, asked, labels] = await Promise.all([
    call(`/v1/jobs/${encodeURIComponent(id)}`),
    call(`/v1/jobs/${encodeURIComponent(id)}/request`),
    call(`/v1/jobs/${encodeURIComponent(id)}/labels`),
  ]);
  const questions = asked.request.questions ?? {};
  const answers = Object.entries(job.result?.answers ?? {}).map(([key, answer]) => el("section", {},
    el("h2", {}, key),
    el("p", {}, questions[key]?.instructions ?? ""),
    el("p", {}, `Answer: ${pick(answer)}`, answer.x_taught ? ` (taught: ${answer.x_taught})` : " (zero-shot)"),
    bars(answer),
    el("p", {}, key in labels.answers ? `Labelled: ${labelName(answer, labels.answers[key])}`
                                      : "Not labelled.")));
  show(page, el("h1", {}, `Decision ${job.id}`),
       el("p", { class: "muted" }, `${job.status}, asked ${new Date(job.created_at).toLocaleString()}`
          + `, model ${job.model}`),
       el("h2", {}, "State"),
       el("div", { class: "state" }, typeof asked.request.state === "string"
          ? asked.request.state : JSON.stringify(asked.request.state, null, 2)),
       answers.length ? answers : el("p", {}, job.error ? `Failed: ${job.error.message}` : "No answer yet."));
}
