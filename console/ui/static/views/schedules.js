// schedules.js: #/schedules, the cron schedules and the singletons
// (GET schedules).

import { h, td, put, table, empty, badge, when, num, dur, parse } from "../dom.js";

const SCOLS = ["Name", "Cron", "Time zone", "Type", "Entity", "Paused", "Next", "Last", "Missed", "Chain", "Catch-up"];

// OUTCOME is the tone of a driver run's outcome.
const OUTCOME = { on_time: "ok", late: "warn", skipped: "warn", missed: "bad" };

// lastCell is the latest tick the chain reached and what became of it.
function lastCell(x) {
  const l = x.last;
  if (!l) return td(x.history_error ? h("span", { title: x.history_error }, "—") : "none yet");
  const r = l.result || {};
  const what = l.status !== "completed" ? badge(l.status, l.status === "failed" || l.status === "cancelled" ? "bad" : "info")
    : r.stopped ? badge(r.stopped, "muted")
      : badge((r.outcome || "?").replace("_", " "), OUTCOME[r.outcome] || "muted");
  return h("td", { testid: "schedule-last", title: `driver ${l.driver}` + (r.fired ? `, fired ${r.fired}` : "") },
    when(l.tick), " ", what);
}

// missedCell counts the ticks that did not fire in the runs read.
function missedCell(x) {
  if (x.missed == null) return h("td", { class: "n", title: x.history_error || "" }, "—");
  const since = parse(x.since);
  const title = `in the last ${x.runs_read} runs` + (since ? ` (since ${since.toISOString()})` : "") + `; ${x.late} late`;
  return h("td", { class: "n", testid: "schedule-missed", title }, x.missed ? badge(num(x.missed, 0), "warn") : "0");
}

// chainCell says whether the chain of driver tasks goes on, on time.
function chainCell(x) {
  if (x.missed == null) return td("—");
  if (x.stopped) {
    const word = x.stopped.startsWith("finished") ? "finished" : x.stopped.length <= 12 ? x.stopped : "stopped";
    const tone = word === "paused" ? "warn" : word === "stopped" ? "bad" : "muted";
    return h("td", { testid: "schedule-chain", title: x.stopped }, badge(word, tone));
  }
  if (x.behind_ms > 0) return h("td", { testid: "schedule-chain", title: `the driver of ${x.waiting} has not run` },
    badge("behind " + dur(x.behind_ms / 1000), "warn"));
  return h("td", { testid: "schedule-chain" }, badge("on time", "ok"));
}
const GCOLS = ["Type", "Runner", "Shard", "Running", "Since", "Restarts"];

export default function schedules(ctx) {
  const sbody = h("tbody");
  const gbody = h("tbody");
  const el = h("section", { class: "view" },
    h("h1", {}, "Schedules"),
    h("h2", {}, "Schedules"), table("Schedules", SCOLS, sbody),
    h("h2", {}, "Singletons"), table("Singletons", GCOLS, gbody));
  let last = "";

  function render(d) {
    const s = d.schedules || [];
    const g = d.singletons || [];
    put(sbody, s.length ? s.map((x) => h("tr", { testid: "schedule-row", "data-name": x.name },
      td(h("strong", {}, x.name)), h("td", { class: "mono" }, x.cron), td(x.tz || "UTC"),
      td(x.type), h("td", { class: "mono" }, x.entity || "—"),
      td(x.paused ? badge("paused", "warn") : "no"),
      td(when(x.next)), lastCell(x), missedCell(x), chainCell(x), td(x.catch_up || "—")))
      : empty(SCOLS.length, "No schedules."));
    put(gbody, g.length ? g.map((x) => h("tr", { testid: "singleton-row", "data-type": x.type },
      td(h("strong", {}, x.type)), td(x.runner || "—"), h("td", { class: "mono" }, x.shard || "—"),
      td(x.running ? badge("running", "ok") : badge("not running", "bad")),
      td(when(x.since)), h("td", { class: "n" }, num(x.restarts))))
      : empty(GCOLS.length, "No singletons."));
  }

  return {
    el,
    async refresh() {
      const d = await ctx.api("GET", "schedules");
      const s = JSON.stringify(d);
      if (s !== last) { last = s; render(d); }
    },
  };
}
