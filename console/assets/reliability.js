// A taught question's reliability diagram: for the decisions labelled for its question, how
// sure each answer was (the probability of its pick) against how often the pick was the label,
// in five bins, with the diagonal of perfect calibration. Read from the labels
// (GET /v1/questions/{id}/examples) and each labelled decision (GET /v1/jobs/{id}, a few at
// a time).

import { call, callLines } from "./api.js";
import { certainty, labelName, pick } from "./answers.js";
import { el } from "./dom.js";

const MOST = 200;
const AT_ONCE = 8; // decisions read in parallel: 200 labels in 25 rounds, not 200
const BINS = 5;
const SVG = "http://www.w3.org/2000/svg";

export async function reliability(taughtId) {
  const lines = await callLines(`/v1/questions/${encodeURIComponent(taughtId)}/examples`);
  const labels = lines.filter(line => line.source === "label").slice(-MOST);
  const pairs = [];
  for (let start = 0; start < labels.length; start += AT_ONCE) {
    const chunk = labels.slice(start, start + AT_ONCE);
    const read = await Promise.all(chunk.map(label => call(`/v1/jobs/${label.job_id}`)));
    chunk.forEach((label, index) => {
      const answer = read[index].result?.answers?.[label.question_key];
      if (answer) pairs.push([certainty(answer), pick(answer) === labelName(answer, label.answer)]);
    });
  }
  const section = el("section", {}, el("h2", {}, "Reliability on labelled decisions"));
  if (!pairs.length) {
    section.append(el("p", {}, "No labelled decision of this question yet."));
    return section;
  }
  const bins = Array.from({ length: BINS }, () => ({ sure: 0, right: 0, count: 0 }));
  for (const [sure, right] of pairs) {
    const bin = bins[Math.min(BINS - 1, Math.floor(sure * BINS))];
    bin.sure += sure;
    bin.right += right ? 1 : 0;
    bin.count += 1;
  }
  const filled = bins.filter(bin => bin.count);
  section.append(
    el("p", { class: "muted" }, `${pairs.length} labelled decisions, each as the readout that `
       + "answered it then; the diagonal is a perfectly calibrated answer."),
    diagram(filled),
    el("table", { id: "reliability" },
      el("thead", {}, el("tr", {}, ...["decisions", "predicted (mean)", "observed"]
        .map(name => el("th", { scope: "col" }, name)))),
      el("tbody", {}, filled.map(bin => el("tr", {},
        el("td", {}, String(bin.count)), el("td", {}, (bin.sure / bin.count).toFixed(3)),
        el("td", {}, (bin.right / bin.count).toFixed(3)))))));
  return section;
}

function diagram(bins) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart reliability");
  svg.setAttribute("viewBox", "0 0 100 100");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "predicted against observed");
  const diagonal = document.createElementNS(SVG, "polyline");
  diagonal.setAttribute("points", "0,100 100,0");
  diagonal.setAttribute("class", "diagonal");
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", bins.map(bin =>
    `${(100 * bin.sure) / bin.count},${100 - (100 * bin.right) / bin.count}`).join(" "));
  svg.append(diagonal, line);
  for (const bin of bins) {
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("cx", String((100 * bin.sure) / bin.count));
    dot.setAttribute("cy", String(100 - (100 * bin.right) / bin.count));
    dot.setAttribute("r", "2");
    svg.append(dot);
  }
  return svg;
}
