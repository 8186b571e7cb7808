// timeline.js: #/timeline, every runner's recent events on one time axis
// (GET timeline?since=): a swimlane per runner with a marker per event, and
// the events as a table, filtered by runner and kind.

import { h, td, put, table, empty, when, parse, swatch } from "../dom.js";

const KINDS = ["attached", "detached", "would_detach", "would_attach", "keepalive_failed", "keepalive_recovered",
  "lease_lost", "storage_error", "mode_changed", "draining", "started", "stopped"];
// CODE is the letter a marker shows, so kinds differ by more than colour.
const CODE = {
  attached: "A", detached: "D", would_detach: "d", would_attach: "a", keepalive_failed: "K", keepalive_recovered: "k",
  lease_lost: "L", storage_error: "S", mode_changed: "M", draining: "R", started: "+", stopped: "×",
};
const TONE = {
  attached: "ok", would_attach: "ok", keepalive_recovered: "ok", started: "ok",
  detached: "bad", lease_lost: "bad", storage_error: "bad", keepalive_failed: "bad", stopped: "bad",
};
const WINDOWS = [[5, "5 minutes"], [15, "15 minutes"], [60, "1 hour"], [360, "6 hours"]];

function option(value, text, selected) {
  return h("option", { value, selected }, text);
}

export default function timeline(ctx) {
  const win = h("select", { id: "tl-window", onchange: () => { last = null; ctx.refresh(); } },
    WINDOWS.map(([m, t]) => option(String(m), t, m === 15)));
  const runner = h("select", { id: "tl-runner", testid: "timeline-runner", onchange: draw }, option("", "all runners"));
  const kind = h("select", { id: "tl-kind", testid: "timeline-kind", onchange: draw },
    option("", "all kinds"), KINDS.map((k) => option(k, k)));
  const missing = h("div", {});
  const lanes = h("div", { class: "lanes" });
  const body = h("tbody");
  const el = h("section", { class: "view" },
    h("h1", {}, "Timeline"),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
      h("label", {}, "Window ", win), h("label", {}, "Runner ", runner), h("label", {}, "Kind ", kind)),
    missing, lanes,
    h("ul", { class: "keys codes", "aria-label": "Marker letters" }, KINDS.map((k) =>
      h("li", {}, h("span", { class: `mk ${TONE[k] || "info"}`, "aria-hidden": "true" }, CODE[k]), k))),
    table("Events, newest first", ["Time", "Runner", "Kind", "Reason", "Detail", "Generation"], body, true));
  let last = null;

  // options keeps a select's options in step with the values seen,
  // keeping the choice.
  function options(sel, values, all) {
    const have = [...sel.options].slice(1).map((o) => o.value);
    if (have.join("\n") === values.join("\n")) return;
    const keep = sel.value;
    sel.replaceChildren(option("", all), values.map((v) => option(v, v, v === keep)));
    if (keep && !values.includes(keep)) sel.append(option(keep, keep, true));
  }

  function draw() {
    const d = last;
    if (!d) return;
    const events = (d.events || []).filter((e) => parse(e.at));
    const ids = [...new Set([...(d.runners || []).map((r) => r.id), ...events.map((e) => e.runner)])].sort();
    options(runner, ids, "all runners");
    options(kind, [...new Set([...KINDS, ...events.map((e) => e.kind)])], "all kinds");
    const fr = runner.value;
    const fk = kind.value;
    const shown = events.filter((e) => (!fr || e.runner === fr) && (!fk || e.kind === fk));

    const down = (d.runners || []).filter((r) => !r.reachable);
    put(missing, down.map((r) => h("p", { class: "warn" }, `${r.id}'s events are missing: ${r.error || "unreachable"}`)));

    const t1 = parse(d.generated_at) || new Date();
    const t0 = new Date(t1 - Number(win.value) * 60000);
    const span = t1 - t0;
    const at = (t) => Math.max(0, Math.min(100, ((t - t0) / span) * 100));
    const axis = h("div", { class: "lane axis", "aria-hidden": "true" }, h("span", { class: "lane-label" }),
      h("div", { class: "track" }, [0, 25, 50, 75, 100].map((p) =>
        h("span", { class: "tick", vars: { "--x": p + "%" } }, when(new Date(+t0 + (span * p) / 100).toISOString())))));
    const rows = ids.filter((id) => !fr || id === fr).map((id) => {
      const mine = shown.filter((e) => e.runner === id);
      return h("div", { class: "lane" },
        h("span", { class: "lane-label" }, swatch(id), id),
        h("div", { class: "track", role: "img", "aria-label": `${id}: ${mine.length} events in the window` },
          mine.map((e) => h("span", {
            class: `mk ${TONE[e.kind] || "info"}`, vars: { "--x": at(parse(e.at)) + "%" },
            title: `${parse(e.at).toISOString()} ${e.runner} ${e.kind}${e.reason ? " (" + e.reason + ")" : ""}${e.detail ? ": " + e.detail : ""}`,
          }, CODE[e.kind] || "?"))));
    });
    put(lanes, axis, rows.length ? rows : h("p", {}, "No runner to show."));

    const newest = shown.slice().sort((a, b) => parse(b.at) - parse(a.at));
    put(body, newest.length ? newest.map((e) => h("tr", { testid: "timeline-event", "data-runner": e.runner, "data-kind": e.kind },
      td(when(e.at)), td(swatch(e.runner), e.runner),
      td(h("span", { class: `mk inline ${TONE[e.kind] || "info"}`, "aria-hidden": "true" }, CODE[e.kind] || "?"), " ", e.kind),
      td(e.reason || ""), h("td", { class: "wrap" }, e.detail || ""), h("td", { class: "n" }, e.generation ?? "")))
      : empty(6, "No events in this window."));
  }

  return {
    el,
    async refresh() {
      const since = new Date(Date.now() - Number(win.value) * 60000).toISOString();
      const d = await ctx.api("GET", `timeline?since=${encodeURIComponent(since)}`);
      last = d;
      draw(); // every time: the axis moves with the clock
    },
  };
}
