// Taught questions: every version, its fit's figures beside zero-shot's on the same examples,
// the learning curve, whether it answers and why, and teaching it again from the labels
// recorded since (POST /v1/questions with from_labels), followed until the fit is ready.

import { call, listed } from "./api.js";
import { el, show } from "./dom.js";
import { reliability } from "./reliability.js";

const WAIT_SECONDS = 10;

export async function taughtList(page) {
  const questions = await listed("/v1/questions", 200);
  show(page, el("h1", {}, "Taught questions"),
       questions.length ? el("table", {},
         el("thead", {}, el("tr", {}, ...["taught question", "instructions", "version", "status",
                                          "answers now", "examples", "taught accuracy",
                                          "zero-shot accuracy"]
           .map(name => el("th", { scope: "col" }, name)))),
         el("tbody", {}, questions.map(taught => el("tr", {},
           el("td", {}, el("a", { href: `#/taught/${taught.id}` }, taught.id)),
           el("td", {}, taught.question.instructions),
           el("td", {}, String(taught.version)),
           el("td", {}, taught.status),
           el("td", {}, taught.answering ? "yes" : "no"),
           el("td", {}, String(taught.examples)),
           el("td", {}, figure(taught.fit?.taught?.accuracy)),
           el("td", {}, figure(taught.fit?.zero_shot?.accuracy))))))
         : el("p", {}, "No taught question yet: teach one with decide teach, POST /v1/questions "
                       + "or from the labels of the label queue."));
}

export async function taughtPage(page, id) {
  const taught = await call(`/v1/questions/${encodeURIComponent(id)}`);
  const versions = await call(`/v1/questions/${encodeURIComponent(id)}/versions?limit=100`);
  const fit = taught.fit;
  const status = el("div", { id: "teaching", "aria-live": "polite" });
  show(page, el("h1", {}, `Taught question ${taught.id}`),
       el("p", {}, `“${taught.question.instructions}” (${taught.question.type}), version `
          + `${taught.version}, ${taught.status}, ${taught.examples} examples`
          + (taught.from_labels ? " with labels" : "")),
       el("p", { id: "answering" }, taught.answering ? "Answers its question now."
          : "Does not answer its question now" + (fit?.gate?.reason ? `: ${fit.gate.reason}` : ".")),
       fit ? figures(fit) : null,
       fit?.learning_curve?.length ? curve(fit.learning_curve) : null,
       await reliability(taught.id),
       el("h2", {}, "Versions"),
       el("ul", {}, versions.data.map(version => el("li", {},
         el("a", { href: `#/taught/${version.id}` }, `version ${version.version}`),
         ` ${version.status}${version.answering ? ", answers now" : ""}`))),
       el("h2", {}, "Teach again"),
       el("p", {}, "A new version of this question, taught from every label recorded for it "
                   + "(this version's own examples are not carried over)."),
       el("button", { type: "button", id: "teach-again",
                      onclick: () => teach(taught.question, taught.model, status) },
          "Teach again from labels"),
       status);
}

// Teach `question` from every label recorded for it (a new version where it was taught
// before), shown in `status` until the fit ends, then its page.
export async function teach(question, model, status) {
  const progress = el("progress", { "aria-label": "fitting" });
  show(status, el("p", {}, "Queued…"), progress);
  const asked = Object.fromEntries(Object.entries(question).filter(([key]) => !key.startsWith("x_")));
  let next;
  try {
    next = await call("/v1/questions", { method: "POST", body: {
      ...(model ? { model } : {}), question: asked, from_labels: true } });
  } catch (error) {
    show(status, el("p", { class: "error", role: "alert" }, error.message));
    return;
  }
  while (next.status === "queued" || next.status === "fitting") {
    show(status, el("p", {}, next.status === "queued" ? "Queued…" : "Fitting…"), progress);
    next = await call(`/v1/questions/${next.id}?wait=${WAIT_SECONDS}`);
  }
  location.hash = `#/taught/${next.id}`;
}

function figure(value) {
  return value === undefined || value === null ? "" : value.toFixed(3);
}

function figures(fit) {
  const row = (name, key) => el("tr", {}, el("th", { scope: "row" }, name),
    el("td", {}, figure(fit.taught?.[key])), el("td", {}, figure(fit.zero_shot?.[key])));
  return el("section", {},
    el("h2", {}, "Cross-validated on its examples"),
    el("table", { id: "figures" },
      el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", { scope: "col" }, "taught"),
                         el("th", { scope: "col" }, "zero-shot"))),
      el("tbody", {}, row("accuracy", "accuracy"), row("ECE", "ece"),
         row("log-loss", "log_loss"))),
    el("p", { class: "muted" }, `Reads ${fit.reads ?? "hidden"}; ${fit.examples} examples; `
       + `fitted in ${figure(fit.seconds)} s.`));
}

function curve(points) {
  return el("section", {},
    el("h2", {}, "Learning curve (held-out accuracy)"),
    el("table", {},
      el("thead", {}, el("tr", {}, ...["examples", "taught", "zero-shot", "served", "used"]
        .map(name => el("th", { scope: "col" }, name)))),
      el("tbody", {}, points.map(point => el("tr", {},
        el("td", {}, String(point.examples)), el("td", {}, figure(point.accuracy)),
        el("td", {}, figure(point.zero_shot?.accuracy)), el("td", {}, figure(point.served?.accuracy)),
        el("td", {}, point.used ? "yes" : "no"))))));
}
