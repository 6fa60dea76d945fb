// Label queue: for one question, the key's recent decisions of it not labelled yet (their
// x_labels), the least sure first (what a label teaches most); one key press records an answer
// (POST /v1/jobs/{id}/labels) and shows the next; u goes back one, where a key press replaces
// that label.

import { call, listed } from "./api.js";
import { bars, certainty, labelChoices, labelName } from "./answers.js";
import { el, show } from "./dom.js";
import { teach } from "./taught.js";

const LOOKED_AT = 500;

export async function labelQueue(page, question) {
  const jobs = await listed("/v1/jobs?status=succeeded", LOOKED_AT);
  const keys = [...new Set(jobs.flatMap(job => Object.keys(job.result?.answers ?? {})))].sort();
  const chooser = el("form", { onsubmit: event => {
    event.preventDefault();
    location.hash = `#/label?question=${encodeURIComponent(picker.value)}`;
  } });
  const picker = el("select", { id: "question", name: "question" },
    keys.map(key => el("option", { value: key, selected: key === question }, key)));
  chooser.append(el("label", { for: "question" }, "Question "), picker, " ",
                 el("button", { type: "submit" }, "Label it"));
  if (!question) {
    show(page, el("h1", {}, "Label queue"),
         keys.length ? chooser : el("p", {}, "No decision to label yet."));
    return undefined;
  }
  const queue = jobs.filter(job => job.result?.answers?.[question]
                              && !(question in (job.x_labels ?? {})))
    .sort((a, b) => certainty(a.result.answers[question]) - certainty(b.result.answers[question]));
  const labelled = new Map();
  let position = 0;
  const region = el("div", { "aria-live": "polite" });
  const teaching = el("div", { "aria-live": "polite" });
  const example = queue[0];
  show(page, el("h1", {}, `Label queue: ${question}`), chooser,
       el("p", { class: "muted" }, "Press a number to record the answer, ", el("kbd", {}, "u"),
          " to go back one."), region,
       example ? el("p", {}, el("button", { type: "button", id: "teach", onclick: async () => {
         const asked = await call(`/v1/jobs/${example.id}/request`);
         await teach(asked.request.questions[question], example.model, teaching);
       } }, "Teach this question from its labels")) : null,
       teaching);

  async function present() {
    const progress = el("p", { id: "progress" },
      `${labelled.size} labelled, ${Math.max(0, queue.length - position)} left`);
    if (position >= queue.length) {
      show(region, progress, el("p", {}, "Nothing left to label for this question."));
      return;
    }
    const job = queue[position];
    const answer = job.result.answers[question];
    const asked = await call(`/v1/jobs/${job.id}/request`);
    const given = labelled.get(job.id);
    show(region, progress,
      el("p", {}, el("a", { href: `#/decisions/${job.id}` }, job.id)),
      el("p", {}, asked.request.questions?.[question]?.instructions ?? ""),
      el("div", { class: "state", id: "state" }, typeof asked.request.state === "string"
        ? asked.request.state : JSON.stringify(asked.request.state, null, 2)),
      bars(answer),
      el("div", { class: "keys" }, labelChoices(answer).map(([name, value], index) =>
        el("button", { type: "button", class: given === value ? "chosen" : null,
                       onclick: () => record(index) },
           el("kbd", {}, String(index + 1)), ` ${name}`))),
      given === undefined ? null : el("p", {}, `Labelled: ${labelName(answer, given)}`));
  }

  async function record(index) {
    const job = queue[position];
    if (!job) return;
    const choices = labelChoices(job.result.answers[question]);
    if (index >= choices.length) return;
    const value = choices[index][1];
    await call(`/v1/jobs/${job.id}/labels`, { method: "POST",
                                              body: { answers: { [question]: value } } });
    labelled.set(job.id, value);
    position += 1;
    await present();
  }

  let busy = false;
  async function onKey(event) {
    if (busy || event.target.closest?.("input, select, textarea")) return;
    const index = Number(event.key) - 1;
    let action = null;
    if (Number.isInteger(index) && index >= 0 && index < 9) action = () => record(index);
    if (event.key === "u" && position > 0) action = () => { position -= 1; return present(); };
    if (!action) return;
    event.preventDefault();
    busy = true;
    try { await action(); } finally { busy = false; }
  }
  document.addEventListener("keydown", onKey);
  await present();
  return () => document.removeEventListener("keydown", onKey);
}
