// Overview: each model's workers, both lanes' depths and oldest waits, the last minute's
// throughput (GET /v1/status), refreshed every few seconds while the page is open, with a
// chart of the key's decisions per minute over the last hour (GET /v1/usage by minute) and
// the latest failed decisions (GET /v1/jobs?status=failed).

import { call } from "./api.js";
import { el, show } from "./dom.js";

const REFRESH_MS = 5000;
const MINUTES = 60;
const FAILURES = 10;

export async function overview(page) {
  let timer = null;
  async function refresh() {
    const now = Math.floor(Date.now() / 60000) * 60;  // this minute's start, in seconds
    const [status, usage] = await Promise.all([
      call("/v1/status"),
      call(`/v1/usage?since=${now - (MINUTES - 1) * 60}&group_by=minute`),
    ]);
    const failed = await call(`/v1/jobs?status=failed&limit=${FAILURES}`
                              + (status.scope === "all" ? "&scope=all" : ""));
    const perMinute = lastHour(usage.data, now);
    show(page, el("h1", {}, "Overview"),
         el("p", { class: "muted" }, status.scope === "all" ? "Every key's work."
                                                            : "Your key's work."),
         lanes(status.models),
         el("h2", {}, "Your decisions per minute, the last hour"),
         chart(perMinute),
         el("p", { class: "muted", id: "last-hour" },
            `${perMinute.reduce((sum, count) => sum + count, 0)} in the last hour; refreshed `
            + `every ${REFRESH_MS / 1000} s while open.`),
         el("h2", {}, "Recent failures"),
         failures(failed.data));
  }
  await refresh();
  timer = setInterval(() => refresh().catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}

// Jobs per minute for the MINUTES minutes up to `now`, oldest first (0 where none finished).
function lastHour(groups, now) {
  const counts = new Map(groups.map(group =>
    [Date.parse(group.minute.replace(/Z$/, ":00Z")) / 1000, group.jobs]));
  return Array.from({ length: MINUTES }, (_, index) =>
    counts.get(now - (MINUTES - 1 - index) * 60) ?? 0);
}

function failures(jobs) {
  if (!jobs.length) return el("p", { id: "failures" }, "None.");
  return el("table", { id: "failures" },
    el("thead", {}, el("tr", {}, ...["decision", "finished", "error"]
      .map(name => el("th", { scope: "col" }, name)))),
    el("tbody", {}, jobs.map(job => el("tr", {},
      el("td", {}, el("a", { href: `#/decisions/${job.id}` }, job.id)),
      el("td", {}, new Date(job.finished_at ?? job.created_at).toLocaleString()),
      el("td", {}, `${job.error?.error_type ?? ""}: ${job.error?.message ?? ""}`)))));
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
  svg.setAttribute("aria-label", `decisions per minute over the last hour, this minute `
                                 + `${samples.at(-1) ?? 0}`);
  const top = Math.max(1, ...samples);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  const drawn = samples.length === 1 ? [samples[0], samples[0]] : samples;  // one: a level line
  line.setAttribute("points", drawn.map((value, index) =>
    `${(100 * index) / Math.max(1, drawn.length - 1)},${30 - (28 * value) / top}`).join(" "));
  svg.append(line);
  return svg;
}
