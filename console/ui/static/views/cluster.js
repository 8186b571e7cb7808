// cluster.js: #/cluster, the runners and the shard counts (GET cluster),
// with a Drain button per runner.

import { h, put, table, empty, badge, field, when, dur, num, enc, note } from "../dom.js";

const COLS = ["Runner", "Address", "Version", "Attachment", "Mode", "Lease left", "Draining", "Config", "Shards",
  "Resident", "Calls/s", "Tasks/s", "Action"];

export default function cluster(ctx) {
  const stats = h("dl", { class: "stats" });
  const body = h("tbody");
  const out = h("p", { class: "note", role: "status" });
  const el = h("section", { class: "view" },
    h("h1", {}, "Cluster"), stats, out, table("Runners", COLS, body));
  let last = "";

  async function drain(id) {
    const ok = await ctx.confirm(`Drain runner ${id}?`,
      `${id} hands its shards over to the other runners, one by one, and stays up owning none. ` +
      "Its running tasks are put back to pending for the new owners.", `Drain ${id}`);
    if (!ok) return;
    note(out, `Asking ${id} to drain…`);
    try {
      const r = await ctx.api("POST", `runners/${enc(id)}/drain`);
      note(out, `${r.runner || id}: drain requested${r.draining ? ", draining" : ""}.`, "ok");
    } catch (e) {
      note(out, `Drain ${id} refused: ${e.message}`, "bad");
    }
    ctx.refresh();
  }

  function row(r, cfgVersion) {
    const td = (f, attrs, ...kids) => h("td", Object.assign({ "data-field": f }, attrs), ...kids);
    const sub = (t) => t ? h("small", { class: "sub" }, t) : "";
    let attach;
    if (!r.reachable) attach = [badge("unreachable", "bad"), sub(r.status_error)];
    else if (r.attached === true) attach = badge("attached", "ok");
    else if (r.attached === false) attach = [badge("detached", "bad"), sub(r.detach_reason)];
    else attach = "—";
    const mode = r.mode == null ? "—" : [r.mode, r.canary ? [" ", badge("canary", "info")] : "",
      sub(r.rollout_bucket == null ? "" : `bucket ${r.rollout_bucket}`)];
    const cfg = [r.config_version == null ? "—" : `v${r.config_version}`,
      r.config_error ? [" ", badge("refused", "bad"), sub(r.config_error)]
        : r.config_version != null && r.config_version < cfgVersion ? [" ", badge(`behind v${cfgVersion}`, "warn")] : ""];
    return h("tr", { testid: "runner-row", "data-runner": r.id, class: r.reachable ? "" : "dim" },
      td("id", {}, h("strong", {}, r.id), r.weight != null && r.weight !== 1 ? h("small", {}, ` weight ${r.weight}`) : ""),
      td("addr", { class: "mono" }, r.addr || "—"),
      td("version", { class: "mono" }, r.version || "—"),
      td("attached", { class: "wrap", "data-value": String(r.attached) }, attach),
      td("mode", {}, mode),
      td("lease_left_seconds", { class: "n" }, dur(r.lease_left_seconds)),
      td("draining", { "data-value": String(!!r.draining) }, r.draining ? badge("draining", "warn") : "no"),
      td("config_version", { class: "wrap" }, cfg),
      td("shards_held", { class: "n" }, num(r.shards_held)),
      td("resident_entities", { class: "n" }, num(r.resident_entities)),
      td("calls_per_second", { class: "n" }, num(r.calls_per_second)),
      td("tasks_per_second", { class: "n" }, num(r.tasks_per_second)),
      td("action", {}, h("button", {
        type: "button", class: "danger small", testid: `drain-${r.id}`, "data-key": "drain:" + r.id,
        "aria-label": `Drain runner ${r.id}`, disabled: !!r.draining, onclick: () => drain(r.id),
      }, r.draining ? "Draining" : "Drain")));
  }

  function render(d) {
    const runners = d.runners || [];
    const down = runners.filter((r) => !r.reachable).length;
    const groups = d.groups || [];
    put(stats,
      field("Cluster", d.cluster),
      field("Runners", String(runners.length), down ? [" ", badge(`${down} unreachable`, "bad")] : ""),
      field("Shards", `${d.shards} in ${groups.length} group${groups.length === 1 ? "" : "s"}`),
      field("Owned", num(d.shards_owned)),
      field("Unowned", d.shards_unowned ? badge(String(d.shards_unowned), "bad") : "0"),
      field("Held by unreachable", d.shards_held_unreachable ? badge(String(d.shards_held_unreachable), "warn") : "0"),
      field("Config", d.config_version == null ? "—" : `v${d.config_version}`),
      field("Served by", d.served_by, " at ", when(d.generated_at)));
    put(body, runners.length ? runners.map((r) => row(r, d.config_version)) : empty(COLS.length, "No runner is registered."));
  }

  return {
    el,
    async refresh() {
      const d = await ctx.api("GET", "cluster");
      const s = JSON.stringify(d);
      if (s !== last) { last = s; render(d); }
    },
  };
}
