// config.js: #/config, the dynamic config document, its rollout and which
// version each runner applied (GET config), and a form that changes it
// (PUT config). A refusal is shown as the API wrote it: it names the keys
// and runners.

import { h, td, put, table, empty, badge, field, num, pretty, note } from "../dom.js";

const COLS = ["Runner", "Reachable", "Applied", "Layer", "Bucket", "Error"];

export default function config(ctx) {
  const facts = h("dl", { class: "stats" });
  const doc = h("pre", { class: "json", testid: "config-document", id: "config-document", "aria-label": "Config document (JSON)" });
  const readErr = h("div", {});
  const body = h("tbody");
  const key = h("input", { id: "config-key", testid: "config-key", autocomplete: "off", spellcheck: "false", placeholder: "detachment.mode" });
  const value = h("input", { id: "config-value", testid: "config-value", autocomplete: "off", spellcheck: "false", placeholder: "observe" });
  const unset = h("input", { id: "config-unset", testid: "config-unset", type: "checkbox" });
  const rollout = h("input", { id: "config-rollout", testid: "config-rollout", type: "number", min: "0", max: "100", step: "1", inputmode: "numeric" });
  const result = h("div", { class: "note", testid: "config-result", id: "config-result", role: "status" });
  const el = h("section", { class: "view" },
    h("h1", {}, "Config"), facts, readErr,
    h("div", { class: "split" },
      h("div", {}, h("h2", {}, "Document"), doc),
      h("form", { class: "panel change", "aria-labelledby": "change-title", onsubmit: apply },
        h("h2", { id: "change-title" }, "Change"),
        h("p", { class: "stack" }, h("label", { for: "config-key" }, "Key"), key),
        h("p", { class: "stack" }, h("label", { for: "config-value" }, "Value"), value),
        h("p", { class: "row" }, unset, h("label", { for: "config-unset" }, "Unset the key (back to its default)")),
        h("p", { class: "stack" }, h("label", { for: "config-rollout" }, "Rollout % (0–100)"), rollout,
          h("span", { class: "hint" }, "Below 100 the change goes to a canary: the runners whose bucket is below it. " +
            "Empty: as tenure config set without --rollout. Alone, it moves the canary in progress.")),
        h("p", { class: "row" }, h("button", { type: "submit", testid: "config-apply" }, "Apply")),
        result)),
    h("h2", {}, "Runners"), table("Runners and the config they run", COLS, body));
  let last = "";

  async function apply(e) {
    e.preventDefault();
    const req = {};
    const k = key.value.trim();
    if (k && unset.checked) req.unset = [k];
    else if (k) req.set = { [k]: value.value };
    const r = rollout.value.trim();
    if (r !== "") {
      const n = Number(r);
      if (!Number.isInteger(n) || n < 0 || n > 100) {
        note(result, `rollout: ${r} is not a whole percentage from 0 to 100`, "bad");
        return;
      }
      req.rollout_percent = n;
    }
    if (!req.set && !req.unset && req.rollout_percent === undefined) {
      note(result, "Nothing to apply: give a key (and a value, or tick Unset), or a rollout percentage.", "bad");
      return;
    }
    note(result, "Applying…");
    try {
      const d = await ctx.api("PUT", "config", req);
      note(result, `Applied: version ${d.version}, rollout ${d.rollout_percent}%.`, "ok");
      last = JSON.stringify(d);
      render(d);
    } catch (err) {
      // Verbatim: the API's reasons name the keys and runners.
      const extra = err.body && Object.keys(err.body).some((x) => x !== "error" && x !== "code") ? "\n" + pretty(err.body) : "";
      note(result, err.message + extra, "bad");
    }
    ctx.refresh();
  }

  function render(d) {
    put(facts,
      field("Version", d.version == null ? "—" : `v${d.version}`),
      field("Revision", num(d.revision)),
      field("Rollout", d.rollout_percent == null ? "—" : `${d.rollout_percent}%`));
    put(readErr, d.error ? h("p", { class: "bad" }, d.error) : null);
    doc.textContent = pretty(d.document ?? null);
    const rs = d.runners || [];
    put(body, rs.length ? rs.map((r) => h("tr", { testid: "config-runner-row", "data-runner": r.id },
      td(h("strong", {}, r.id)),
      td(r.reachable ? "yes" : badge("unreachable", "bad")),
      td(r.applied_version == null ? "—" : `v${r.applied_version}`,
        r.applied_version != null && r.applied_version < d.version ? [" ", badge("behind", "warn")] : ""),
      td(r.canary ? badge("canary", "info") : "base"),
      h("td", { class: "n" }, num(r.rollout_bucket)),
      h("td", { class: "wrap" }, r.error ? badge("refused", "bad") : "", r.error ? " " + r.error : "")))
      : empty(COLS.length, "No runner is registered."));
  }

  return {
    el,
    async refresh() {
      const d = await ctx.api("GET", "config");
      const s = JSON.stringify(d);
      if (s !== last) { last = s; render(d); }
    },
  };
}
