// Overview: each model's workers, both lanes' depths and oldest waits, the last minute's
// throughput (GET /v1/status), refreshed every few seconds while the page is open, with a
// chart of the jobs finished per minute seen since it was opened (at most an hour).

import { call } from "./api.js";
import { el, show } from "./dom.js";

const REFRESH_MS = 5000;
const KEPT_SAMPLES = 3600000 / REFRESH_MS;

export async function overview(page) {
  const samples = [];
  let timer = null;
  async function refresh() {
    const status = await call("/v1/status");
    samples.push(status.models.reduce((sum, model) => sum + model.last_minute.jobs, 0));
    if (samples.length > KEPT_SAMPLES) samples.shift();
    show(page, el("h1", {}, "Overview"),
         el("p", { class: "muted" }, status.scope === "all" ? "Every key's work."
                                                            : "Your key's work."),
         lanes(status.models),
         el("h2", {}, "Jobs finished in the last minute"),
         chart(samples),
         el("p", { class: "muted" }, `Refreshed every ${REFRESH_MS / 1000} s while open.`));
  }
  await refresh();
  timer = setInterval(() => refresh().catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}

function lanes(models) {
  const rows = models.flatMap(model => ["foreground", "background"].map(lane => {
    const view = model.lanes[lane];
    return el("tr", {},
      el("td", {}, model.name + (model.default ? " (default)" : "")),
      el("td", {}, String(model.workers)),
      el("td", {}, lane),
      el("td", {}, String(view.queued)),
      el("td", {}, String(view.running)),
      el("td", {}, `${view.oldest_queued_age_seconds} s`),
      el("td", {}, String(model.last_minute.jobs)),
      el("td", {}, String(model.last_minute.tokens_per_second)));
  }));
  return el("table", {},
    el("thead", {}, el("tr", {}, ...["model", "workers", "lane", "queued", "running",
                                     "oldest wait", "jobs last minute", "tokens/s"]
      .map(name => el("th", { scope: "col" }, name)))),
    el("tbody", {}, rows));
}

function chart(samples) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", "0 0 100 30");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `jobs per minute, latest ${samples.at(-1) ?? 0}`);
  const top = Math.max(1, ...samples);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  const drawn = samples.length === 1 ? [samples[0], samples[0]] : samples;  // one: a level line
  line.setAttribute("points", drawn.map((value, index) =>
    `${(100 * index) / Math.max(1, drawn.length - 1)},${30 - (28 * value) / top}`).join(" "));
  svg.append(line);
  return svg;
}
