// entities.js: #/entities, one entity looked up by type and id
// (GET entities/{type}/{id}?group=): where it lives, its stored state and
// reminders, and a form that calls one of its operations
// (POST entities/{type}/{id}/{op}).

import { h, td, put, table, empty, badge, field, when, num, enc, pre, pretty, note } from "../dom.js";

export default function entities(ctx) {
  const p = ctx.params;
  const type = h("input", { id: "entity-type", testid: "entity-type", required: true, autocomplete: "off", spellcheck: "false", value: p.get("type") || "", placeholder: "counter" });
  const id = h("input", { id: "entity-id", testid: "entity-id", required: true, autocomplete: "off", spellcheck: "false", value: p.get("id") || "", placeholder: "c1" });
  const group = h("input", { id: "entity-group", testid: "entity-group", autocomplete: "off", spellcheck: "false", value: p.get("group") || "", placeholder: "default" });
  const result = h("div", { class: "result", "aria-live": "polite" });
  const op = h("select", { id: "entity-op", testid: "entity-op" });
  const input = h("textarea", { id: "entity-input", testid: "entity-input", rows: "5", spellcheck: "false", placeholder: "{}" });
  const output = h("pre", { class: "json", testid: "entity-call-output", id: "entity-call-output", "aria-live": "polite" });
  const meta = h("p", { class: "note" });
  const callForm = h("form", { class: "call", hidden: true, "aria-labelledby": "call-title", onsubmit: call },
    h("h2", { id: "call-title" }, "Call an operation"),
    h("p", { class: "row" }, h("label", { for: "entity-op" }, "Operation"), op),
    h("p", { class: "stack" }, h("label", { for: "entity-input" }, "Input (JSON, may be empty)"), input),
    h("p", { class: "row" }, h("button", { type: "submit", testid: "entity-call" }, "Call")),
    meta,
    h("h3", {}, "Output"), output);
  const el = h("section", { class: "view" },
    h("h1", {}, "Entities"),
    h("form", { class: "filters", role: "search", "aria-label": "Look up an entity", onsubmit: lookup },
      h("label", { for: "entity-type" }, "Type"), type,
      h("label", { for: "entity-id" }, "Id"), id,
      h("label", { for: "entity-group" }, "Group"), group,
      h("button", { type: "submit", testid: "entity-lookup" }, "Look up")),
    result, callForm);
  let key = null; // {type, id, group} of the entity shown
  let last = "";

  function query(k) {
    return k.group ? `?group=${enc(k.group)}` : "";
  }

  function lookup(e) {
    e.preventDefault();
    const k = { type: type.value.trim(), id: id.value, group: group.value.trim() };
    if (!k.type || !k.id) return;
    key = k;
    last = "";
    ctx.setQuery(new URLSearchParams(Object.entries(k).filter(([, v]) => v)).toString());
    put(result, h("p", {}, `Looking up ${k.type} ${k.id}…`));
    ctx.refresh();
  }

  async function call(e) {
    e.preventDefault();
    const k = key;
    if (!k || !op.value) return;
    const text = input.value.trim();
    if (text) {
      try { JSON.parse(text); } catch (err) {
        output.textContent = "";
        note(meta, `The input is not JSON: ${err.message}`, "bad");
        return;
      }
    }
    note(meta, `Calling ${op.value}…`);
    try {
      const r = await ctx.api("POST", `entities/${enc(k.type)}/${enc(k.id)}/${enc(op.value)}${query(k)}`, text);
      output.textContent = pretty(r.output);
      note(meta, `${op.value} answered by ${r.runner} in ${num(r.took_ms)} ms.`, "ok");
    } catch (err) {
      output.textContent = "";
      note(meta, `${op.value} failed${err.code ? " (" + err.code + ")" : ""}: ${err.message}`, "bad");
    }
    ctx.refresh();
  }

  function ops(list) {
    const have = [...op.options].map((o) => o.value);
    if (have.join("\n") === list.join("\n")) return;
    const keep = op.value;
    op.replaceChildren(...list.map((o) => h("option", { value: o, selected: o === keep }, o)));
  }

  function render(d) {
    const st = d.state;
    put(result,
      h("h2", {}, h("span", { class: "mono" }, `${d.type} ${d.id}`)),
      h("dl", { class: "facts" },
        field("Group", d.group || "—"), field("Shard", d.shard || "—"), field("Runner", d.runner || "—"),
        field("Resident", d.resident ? badge("resident", "ok") : "not in memory")),
      h("h3", {}, "State"),
      st ? h("dl", { class: "facts" },
        field("Rev", num(st.rev)), field("Epoch", num(st.epoch)), field("Size", `${num(st.size)} bytes`),
        field("Saved", when(st.saved_at)), field("Writer", st.writer || "—"))
        : h("p", { class: d.state_error ? "bad" : "" }, d.state_error || "No state stored."),
      pre(st ? st.json : null, { testid: "entity-state", id: "entity-state", "aria-label": "Stored state (JSON)" }),
      h("h3", {}, "Reminders"),
      table("Reminders", ["Name", "Operation", "Due"], h("tbody", {}, (d.reminders || []).length
        ? d.reminders.map((r) => h("tr", {}, td(r.name), td(r.op), td(when(r.due))))
        : empty(3, "No reminders."))));
    ops(d.operations || []);
    callForm.hidden = false;
    const none = !(d.operations || []).length;
    op.disabled = none;
    callForm.querySelector("button").disabled = none;
    if (none) note(meta, "This type lists no operations.");
  }

  if (p.get("type") && p.get("id")) key = { type: type.value, id: id.value, group: group.value };

  return {
    el,
    async refresh() {
      const k = key;
      if (!k) return false;
      let d;
      try {
        d = await ctx.api("GET", `entities/${enc(k.type)}/${enc(k.id)}${query(k)}`);
      } catch (err) {
        // A lookup the API refuses (unknown type, no credential) is the
        // answer, not a failed poll of data already shown.
        if (k === key && !last) {
          put(result, h("p", { class: "bad" }, `${k.type} ${k.id}: ${err.message}`));
          callForm.hidden = true;
          return false;
        }
        throw err;
      }
      if (k !== key) return;
      const s = JSON.stringify(d);
      if (s !== last) { last = s; render(d); }
    },
  };
}
