// shards.js: #/shards, a grid per group with one cell per shard coloured by
// the runner holding its lock (GET shards), and the detail of one shard
// (GET shards/{group}/{index}): its lock history and resident entities.
// States other than owned are told apart by border, pattern and a mark,
// not by colour alone.

import { h, td, put, table, empty, badge, field, when, num, enc, swatch, colour } from "../dom.js";

const MARK = { owned: "", moving: "→", unowned: "∅", unreachable: "!" };
const SAY = {
  owned: "owned", moving: "moving (holder is not the assigned runner, or is draining)",
  unowned: "unowned (no lock)", unreachable: "holder unreachable",
};

export default function shards(ctx) {
  const legend = h("div", { class: "legend" });
  const groups = h("div", { class: "groups", onkeydown: keys });
  const detail = h("aside", { class: "panel", id: "shard-detail", testid: "shard-detail", hidden: true, "aria-label": "Shard detail" });
  const el = h("section", { class: "view" },
    h("h1", {}, "Shards"),
    h("p", { class: "hint" }, "A cell per shard, coloured by the runner holding its lock. Arrow keys move between cells; Enter or Space opens one."),
    legend, h("div", { class: "split" }, groups, detail));
  const cells = new Map(); // shard id → button
  const grids = new Map(); // group name → {sec, head, grid}
  let sel = null; // the shard whose detail is open
  let focused = null; // the cell that last had the focus: its group's tab stop
  let lastDetail = "";

  function open(id) {
    sel = id;
    lastDetail = "";
    detail.hidden = false;
    put(detail, h("p", {}, `Loading shard ${id}…`));
    marks();
    if (detail.getBoundingClientRect().top > innerHeight) detail.scrollIntoView({ block: "nearest" });
    ctx.refresh();
  }

  function close() {
    const c = cells.get(sel);
    sel = null;
    detail.hidden = true;
    marks();
    if (c) c.focus();
  }

  function marks() {
    for (const [id, c] of cells) {
      c.classList.toggle("sel", id === sel);
      c.setAttribute("aria-expanded", String(id === sel));
    }
  }

  // stops gives each group's grid one tab stop (roving tabindex): the cell
  // last focused, else the open one, else the first.
  function stops() {
    for (const { grid } of grids.values()) {
      const all = [...grid.children];
      const stop = all.find((c) => c.dataset.shard === focused) || all.find((c) => c.dataset.shard === sel) || all[0];
      for (const c of all) c.tabIndex = c === stop ? 0 : -1;
    }
  }

  function keys(e) {
    const c = e.target.closest(".cell");
    if (!c) return;
    if (e.key === "Escape" && sel) { close(); return; }
    const all = [...c.parentElement.children];
    const i = all.indexOf(c);
    const cols = Math.max(1, all.filter((x) => x.offsetTop === all[0].offsetTop).length);
    const to = { ArrowRight: i + 1, ArrowLeft: i - 1, ArrowDown: i + cols, ArrowUp: i - cols, Home: 0, End: all.length - 1 }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    const n = all[Math.max(0, Math.min(all.length - 1, to))];
    n.focus();
  }

  function cell(id) {
    return h("button", {
      type: "button", class: "cell", testid: "shard-cell", "data-shard": id, "aria-controls": "shard-detail",
      onclick: () => open(id), onfocus: () => { focused = id; stops(); },
    }, h("span", { class: "idx" }), h("span", { class: "mark", "aria-hidden": "true" }));
  }

  function update(c, s) {
    const state = s.state || "owned";
    c.setAttribute("data-holder", s.holder || "");
    c.setAttribute("data-state", state);
    c.className = `cell st-${MARK[state] === undefined ? "other" : state}` + (s.id === sel ? " sel" : "");
    if (s.holder) c.style.setProperty("--c", colour(s.holder));
    else c.style.removeProperty("--c");
    c.firstChild.textContent = String(s.index);
    c.lastChild.textContent = MARK[state] || "";
    let label = `Shard ${s.id}: ${SAY[state] || state}; holder ${s.holder || "none"}; epoch ${s.epoch}`;
    if (s.assigned && s.assigned !== s.holder) label += `; assigned to ${s.assigned}`;
    c.title = label;
    c.setAttribute("aria-label", label);
    c.setAttribute("aria-expanded", String(s.id === sel));
  }

  function renderMap(m) {
    const held = new Map();
    const states = new Map();
    for (const g of m.groups || []) {
      for (const s of g.shards || []) {
        if (s.holder) held.set(s.holder, (held.get(s.holder) || 0) + 1);
        states.set(s.state, (states.get(s.state) || 0) + 1);
      }
    }
    const ids = [...new Set([...(m.runners || []), ...held.keys()])].sort();
    put(legend,
      h("h2", { class: "sr" }, "Legend"),
      h("ul", { class: "keys", "aria-label": "Runners" }, ids.map((id) =>
        h("li", {}, swatch(id), h("strong", {}, id), ` ${held.get(id) || 0} shards`))),
      h("ul", { class: "keys", "aria-label": "States" }, ["moving", "unowned", "unreachable"].map((st) =>
        h("li", {}, h("span", { class: `cell mini st-${st}`, "aria-hidden": "true" }, h("span", { class: "mark" }, MARK[st])),
          `${st} ${states.get(st) || 0}`))));

    const seen = new Set();
    const names = new Set();
    for (const g of m.groups || []) {
      names.add(g.name);
      let G = grids.get(g.name);
      if (!G) {
        const head = h("h2", {});
        const grid = h("div", { class: "grid", role: "group", "aria-label": `Shards of group ${g.name}` });
        G = { sec: h("section", { class: "group" }, head, grid), head, grid };
        grids.set(g.name, G);
        groups.append(G.sec);
      }
      const list = g.shards || [];
      const odd = list.filter((s) => s.state !== "owned").length;
      G.head.textContent = `Group ${g.name} · ${list.length} shards` + (odd ? ` · ${odd} not settled` : "");
      list.forEach((s, i) => {
        let c = cells.get(s.id);
        if (!c) { c = cell(s.id); cells.set(s.id, c); }
        update(c, s);
        if (G.grid.children[i] !== c) G.grid.insertBefore(c, G.grid.children[i] || null);
        seen.add(s.id);
      });
    }
    for (const [id, c] of cells) if (!seen.has(id)) { c.remove(); cells.delete(id); }
    for (const [name, G] of grids) if (!names.has(name)) { G.sec.remove(); grids.delete(name); }
    if (!grids.size) put(groups, h("p", {}, "No shard groups."));
    stops();
  }

  function renderDetail(id, res) {
    const s = res.error ? "error " + res.error.message : JSON.stringify(res.data);
    if (s === lastDetail) return;
    lastDetail = s;
    const head = h("div", { class: "panel-head" },
      h("h2", {}, `Shard ${id}`),
      h("button", { type: "button", class: "small", "data-key": "close", "aria-label": "Close shard detail", onclick: close }, "Close"));
    if (res.error) {
      put(detail, head, h("p", { class: "bad" }, res.error.message));
      return;
    }
    const d = res.data;
    const hist = (d.history || []).slice().reverse();
    let resident;
    if (Array.isArray(d.resident)) {
      resident = d.resident.length ? h("ul", { class: "entities" }, d.resident.map((r) => {
        const group = (d.id || id).split("/").slice(0, -1).join("/");
        const q = new URLSearchParams({ type: r.type, id: r.id, group });
        return h("li", {}, h("a", { href: `#/entities?${q}` }, h("span", { class: "mono" }, `${r.type} ${r.id}`)));
      })) : h("p", {}, "None resident.");
    } else resident = h("p", { class: "warn" }, d.resident_error || "Resident entities not shown.");
    put(detail, head,
      h("dl", { class: "facts" },
        field("State", badge(d.state, d.state === "owned" ? "ok" : d.state === "moving" ? "warn" : "bad")),
        field("Holder", d.holder ? [swatch(d.holder), d.holder] : "none"),
        field("Epoch", num(d.epoch)),
        field("Assigned", d.assigned ? [swatch(d.assigned), d.assigned] : "—")),
      h("h3", {}, "Lock history"),
      h("p", { class: "hint" }, "Newest first, as the serving runner saw them since it started (at most 50)."),
      table(`Lock history of shard ${id}`, ["Time", "Event", "Runner", "Epoch", "Detail"],
        h("tbody", {}, hist.length ? hist.map((e) => h("tr", {},
          td(when(e.at)), td(e.event), td(e.runner || "—"), h("td", { class: "n" }, num(e.epoch)),
          td(e.detail || ""))) : empty(5, "No lock change seen."))),
      h("h3", {}, "Resident entities"), resident);
  }

  return {
    el,
    async refresh() {
      const want = sel;
      let path = "";
      if (want) {
        const i = want.lastIndexOf("/");
        path = `shards/${enc(want.slice(0, i))}/${enc(want.slice(i + 1))}`;
      }
      const [m, one] = await Promise.all([
        ctx.api("GET", "shards"),
        want ? ctx.api("GET", path).then((data) => ({ data }), (error) => ({ error })) : null,
      ]);
      renderMap(m);
      if (want && want === sel) renderDetail(want, one);
    },
  };
}
