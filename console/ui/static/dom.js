// dom.js: helpers that build the console's DOM. Every value from the API
// goes in as a text node or an attribute, never as markup: entity state
// and task inputs are user data.

// h builds an element. attrs: "class", "text", "testid" (data-testid),
// "vars" (CSS custom properties, set through CSSOM, which the CSP allows),
// on<event> functions, "value"/"checked" (properties); anything else is an
// attribute (true → present, null/false/undefined → absent).
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k === "testid") el.setAttribute("data-testid", v);
    else if (k === "vars") for (const [n, x] of Object.entries(v)) el.style.setProperty(n, x);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value" || k === "checked") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  add(el, kids);
  return el;
}

// add appends children: nodes, strings and numbers (as text), arrays of
// them; null, undefined and false are skipped.
export function add(el, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k == null || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

// put replaces el's children. A poll re-renders every 2 s, so the element
// that had the focus (found again by its data-key) gets it back.
export function put(el, ...kids) {
  const a = document.activeElement;
  const key = a && a !== el && el.contains(a) ? a.getAttribute("data-key") : null;
  el.replaceChildren();
  add(el, kids);
  if (key) {
    const n = el.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (n) n.focus({ preventScroll: true });
  }
}

// table returns a horizontally scrollable table with a caption (for
// screen readers; visible when shown is true) and column headers.
export function table(caption, cols, body, shown) {
  return h("div", { class: "scroll" },
    h("table", {},
      h("caption", { class: shown ? "" : "sr" }, caption),
      h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col" }, c)))),
      body));
}

// td is a plain table cell.
export const td = (...kids) => h("td", {}, ...kids);

// empty is a table row saying there is nothing to show.
export function empty(cols, text) {
  return h("tr", { class: "none" }, h("td", { colspan: cols }, text));
}

// badge is a short status word; tone is ok, bad, warn, info or muted.
export function badge(text, tone) {
  return h("span", { class: "badge " + (tone || "") }, text);
}

// field is one term and value of a definition list.
export function field(term, ...value) {
  return h("div", {}, h("dt", {}, term), h("dd", {}, ...value));
}

// pre shows a JSON value pretty-printed.
export function pre(v, attrs) {
  return h("pre", Object.assign({ class: "json" }, attrs), pretty(v));
}

export function pretty(v) {
  return v === undefined ? "" : JSON.stringify(v, null, 2);
}

// enc encodes one path segment of an API URL.
export const enc = encodeURIComponent;

const pad = (n, w = 2) => String(n).padStart(w, "0");

// when returns a <time> element: local clock time (with the date when it
// is not today), the UTC RFC 3339 form in its title. Zero or missing
// times read as a dash.
export function when(iso) {
  const d = parse(iso);
  if (!d) return "—";
  return h("time", { datetime: d.toISOString(), title: d.toISOString() }, clock(d));
}

// clock is a Date's local time, with the date when it is not today.
export function clock(d) {
  const t = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return d.toDateString() === new Date().toDateString() ? t : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${t}`;
}

// parse reads an RFC 3339 time; null for missing, zero (Go's zero
// time) or malformed ones.
export function parse(iso) {
  if (!iso || iso.startsWith("0001-01-01")) return null;
  const d = new Date(iso);
  return isNaN(d) ? null : d;
}

// dur formats seconds for people: 9.2 s, 3 m 12 s, 2 h 05 m, 3 d 4 h.
export function dur(s) {
  if (s == null || !isFinite(s)) return "—";
  if (s < 0) return "-" + dur(-s);
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${pad(Math.floor(s % 60))} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${pad(Math.floor((s % 3600) / 60))} m`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

// num formats a rate or count; null (an unreachable runner) reads as a dash.
export function num(x, digits = 1) {
  if (x == null || !isFinite(x)) return "—";
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}

// PALETTE: ten fills far apart, light enough for dark text in both
// schemes. A runner's is picked by a hash of its id, so it keeps it across
// pages, reloads and membership changes; the seed was chosen so that the
// usual names (r1…r4, runner-0…2, node1…3) get different ones.
const PALETTE = ["#ff8a9a", "#7eb0ff", "#ffa64d", "#5fd3d0", "#ffe066", "#ff9be6", "#d4b483", "#7fd88a", "#c39bff", "#b8e05a"];

// colour is the fill for a runner id ("" for none): FNV-1a, then a
// finaliser so ids that differ in one character spread.
export function colour(id) {
  if (!id) return "";
  let x = 0x811c9dc5 ^ 38;
  for (const c of id) x = Math.imul(x ^ c.codePointAt(0), 0x01000193);
  x ^= x >>> 16; x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13; x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return PALETTE[(x >>> 0) % PALETTE.length];
}

// swatch is a small square of a runner's colour.
export function swatch(id) {
  return h("span", { class: "swatch", "aria-hidden": "true", vars: id ? { "--c": colour(id) } : null });
}

// note shows an action's outcome in a status line; tone ok or bad.
export function note(el, text, tone) {
  el.className = "note " + (tone || "");
  el.textContent = text;
}
