// tasks.js: #/tasks, the task list (GET tasks?status=&type=&entity=
// &older_than=&group=&after=), paged with its "next" cursor, and one
// task's detail with its history (GET tasks/{group}/{shard}/{id}), Replay
// and Cancel (POST …/replay, …/cancel).

import { h, td, put, table, empty, badge, field, when, dur, num, enc, pre, note } from "../dom.js";

const STATUSES = ["pending", "running", "completed", "failed", "cancelled"];
const TONE = { completed: "ok", failed: "bad", cancelled: "muted", running: "info" };
const COLS = ["Ref", "Type", "Entity", "Status", "Attempt", "Created", "Updated", "Age"];
const PAGE = 100;

// refPath turns "group/3/ID" into the API path's encoded segments (the
// last two are the shard index and id; the rest is the group).
function refPath(ref) {
  const parts = ref.split("/");
  const id = parts.pop();
  const shard = parts.pop();
  return [parts.join("/"), shard, id].map(enc).join("/");
}

export default function tasks(ctx) {
  const p = ctx.params;
  const status = h("select", { id: "task-status", testid: "task-status" },
    h("option", { value: "" }, "any"), STATUSES.map((s) => h("option", { value: s, selected: p.get("status") === s }, s)));
  const input = (name, attrs) => h("input", Object.assign({
    id: attrs.testid, autocomplete: "off", spellcheck: "false", value: p.get(name) || "",
  }, attrs));
  const type = input("type", { testid: "task-type" });
  const entity = input("entity", { testid: "task-entity" });
  const older = input("older_than", { testid: "task-older", type: "number", min: "0", step: "any", inputmode: "decimal" });
  const group = input("group", { testid: "task-group", placeholder: "all" });
  const prev = h("button", { type: "button", testid: "task-prev", disabled: true, onclick: () => page(-1) }, "Previous page");
  const next = h("button", { type: "button", testid: "task-next", disabled: true, onclick: () => page(1) }, "Next page");
  const pageInfo = h("span", { class: "hint" });
  const body = h("tbody");
  const actNote = h("p", { class: "note", role: "status" });
  const detail = h("aside", { class: "panel", testid: "task-detail", id: "task-detail", hidden: true, "aria-label": "Task detail" });
  const el = h("section", { class: "view" },
    h("h1", {}, "Tasks"),
    h("form", { class: "filters", role: "search", "aria-label": "Filter tasks", onsubmit: apply, onchange: apply },
      h("label", { for: "task-status" }, "Status"), status,
      h("label", { for: "task-type" }, "Type"), type,
      h("label", { for: "task-entity" }, "Entity"), entity,
      h("label", { for: "task-older" }, "Older than (s)"), older,
      h("label", { for: "task-group" }, "Group"), group,
      h("button", { type: "submit", testid: "task-apply" }, "Apply")),
    table("Tasks", COLS, body),
    h("p", { class: "row pager" }, prev, next, pageInfo),
    detail);
  let filter = read();
  let cursors = [""]; // the "after" of each page seen; the last is shown
  let nextCursor = "";
  let sel = null;
  let last = "";
  let lastDetail = "";

  function read() {
    return { status: status.value, type: type.value.trim(), entity: entity.value.trim(), older_than: older.value.trim(), group: group.value.trim() };
  }

  // apply runs on submit and on every change (a select picked, a field
  // left): the list follows the filters without a separate step.
  function apply(e) {
    e.preventDefault();
    const f = read();
    if (e.type === "change" && JSON.stringify(f) === JSON.stringify(filter)) return;
    filter = f;
    cursors = [""];
    last = "";
    ctx.setQuery(new URLSearchParams(Object.entries(filter).filter(([, v]) => v)).toString());
    ctx.refresh();
  }

  function page(dir) {
    if (dir > 0 && nextCursor) cursors.push(nextCursor);
    if (dir < 0 && cursors.length > 1) cursors.pop();
    last = "";
    ctx.refresh();
  }

  function open(ref) {
    sel = ref;
    lastDetail = "";
    note(actNote, "");
    detail.hidden = false;
    put(detail, h("p", {}, `Loading task ${ref}…`));
    for (const r of body.children) r.classList.toggle("sel", r.dataset.ref === sel);
    detail.scrollIntoView({ block: "nearest" });
    ctx.refresh();
  }

  function close() {
    const ref = sel;
    sel = null;
    detail.hidden = true;
    for (const r of body.children) r.classList.remove("sel");
    const b = body.querySelector(`[data-key="${CSS.escape("task:" + ref)}"]`);
    if (b) b.focus();
  }

  async function act(verb, t) {
    const ok = await ctx.confirm(`${verb === "replay" ? "Replay" : "Cancel"} task ${t.ref}?`,
      verb === "replay" ? "It runs again from its input, as a new attempt." : "It stops (a running attempt is interrupted) and is not retried.",
      verb === "replay" ? "Replay" : "Cancel task");
    if (!ok) return;
    note(actNote, `${verb}…`);
    try {
      const r = await ctx.api("POST", `tasks/${refPath(t.ref)}/${verb}`);
      lastDetail = "";
      renderDetail({ data: r });
      note(actNote, `${verb === "replay" ? "Replayed" : "Cancel requested"}: status ${r.status}.`, "ok");
    } catch (e) {
      note(actNote, `${verb} refused: ${e.message}`, "bad");
    }
    ctx.refresh();
  }

  function row(t) {
    return h("tr", { testid: "task-row", "data-ref": t.ref, class: t.ref === sel ? "sel" : "", onclick: (e) => { if (!e.target.closest("button")) open(t.ref); } },
      td(h("button", { type: "button", class: "linkish mono ref", "data-key": "task:" + t.ref, title: t.ref, onclick: () => open(t.ref) }, t.ref)),
      td(t.type), h("td", { class: "mono" }, t.entity || "—"),
      td(badge(t.status, TONE[t.status])), h("td", { class: "n" }, num(t.attempt)),
      td(when(t.created_at)), td(when(t.updated_at)), h("td", { class: "n" }, dur(t.age_seconds)));
  }

  function renderDetail(res) {
    const key = res.error ? "error " + res.error.message : JSON.stringify(res.data);
    if (key === lastDetail) return;
    lastDetail = key;
    const head = h("div", { class: "panel-head" },
      h("h2", {}, "Task ", h("span", { class: "mono" }, sel)),
      h("button", { type: "button", class: "small", "data-key": "close", "aria-label": "Close task detail", onclick: close }, "Close"));
    if (res.error) {
      put(detail, head, h("p", { class: "bad" }, res.error.message));
      return;
    }
    const t = res.data;
    const done = ["completed", "failed", "cancelled"].includes(t.status);
    const c = t.claim;
    put(detail, head,
      h("p", { class: "row" },
        h("button", { type: "button", testid: "task-replay", "data-key": "replay", onclick: () => act("replay", t) }, "Replay"),
        h("button", { type: "button", class: "danger", testid: "task-cancel", "data-key": "cancel", disabled: done, onclick: () => act("cancel", t) }, "Cancel")),
      actNote,
      h("dl", { class: "facts" },
        field("Type", t.type), field("Entity", t.entity || "—"), t.op ? field("Operation", t.op) : null,
        field("Status", badge(t.status, TONE[t.status]), t.cancel_requested ? " (cancel requested)" : ""),
        field("Attempt", `${num(t.attempt)} of ${num(t.max_attempts)}`),
        field("Created", when(t.created_at)), field("Updated", when(t.updated_at)), field("Available", when(t.available_at)),
        t.timeout ? field("Timeout", String(t.timeout)) : null,
        c ? field("Claim", `runner ${c.runner_id}, epoch ${c.epoch}, lease until `, when(c.lease_expires_at)) : null,
        t.trace ? field("Trace", h("span", { class: "mono" }, t.trace)) : null,
        t.corrupt || t.corrupt_size ? field("Corrupt", `the stored object did not decode (${num(t.corrupt_size)} bytes kept)`) : null),
      h("h3", {}, "Input"), t.input === undefined ? h("p", {}, "None.") : pre(t.input),
      t.result !== undefined ? [h("h3", {}, "Result"), pre(t.result)] : null,
      t.error ? [h("h3", {}, "Error"), h("pre", { class: "json bad" }, t.error)] : null,
      h("h3", {}, "History"),
      t.history_dropped ? h("p", { class: "hint" }, `${t.history_dropped} older entries dropped.`) : null,
      table(`History of task ${t.ref || sel}`, ["Time", "Event", "Runner", "Attempt", "Detail"],
        h("tbody", {}, (t.history || []).length ? t.history.map((e) => h("tr", {},
          td(when(e.at)), td(e.event), td(e.runner || "—"), h("td", { class: "n" }, num(e.attempt)),
          h("td", { class: "wrap" }, e.detail || ""))) : empty(5, "No history."))),
      h("details", {}, h("summary", {}, "The task as JSON"), pre(t)));
  }

  return {
    el,
    async refresh() {
      const q = new URLSearchParams(Object.entries(filter).filter(([, v]) => v));
      const after = cursors[cursors.length - 1];
      if (after) q.set("after", after);
      q.set("limit", String(PAGE));
      const want = sel;
      const [d, one] = await Promise.all([
        ctx.api("GET", `tasks?${q}`),
        want ? ctx.api("GET", `tasks/${refPath(want)}`).then((data) => ({ data }), (error) => ({ error })) : null,
      ]);
      nextCursor = d.next || "";
      next.disabled = !nextCursor;
      prev.disabled = cursors.length < 2;
      pageInfo.textContent = `Page ${cursors.length}` + ((d.tasks || []).length ? `, ${d.tasks.length} tasks` : "");
      const s = JSON.stringify(d.tasks);
      if (s !== last) {
        last = s;
        put(body, (d.tasks || []).length ? d.tasks.map(row) : empty(COLS.length, "No task matches."));
      }
      if (want && want === sel) renderDetail(one);
    },
  };
}
