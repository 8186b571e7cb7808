// schedules.js: #/schedules, the cron schedules and the singletons
// (GET schedules).

import { h, td, put, table, empty, badge, when, num } from "../dom.js";

const SCOLS = ["Name", "Cron", "Time zone", "Type", "Entity", "Paused", "Next", "Last", "Missed", "Catch-up"];
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
      td(when(x.next)), td(when(x.last)),
      h("td", { class: "n" }, x.missed ? badge(num(x.missed), "warn") : "0"), td(x.catch_up || "—")))
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
