"""The viewer's JavaScript (vanilla, no libraries), inlined into every page.

It reads the JSON of `_data.view_data`, groups nodes into a module tree from their module
paths, and lays out only what is visible: each expanded module is a block laid out on its
own (longest-path layers, dummy nodes for long edges, barycentre ordering, balanced
placement) and is one item of its parent's layout, so expand/collapse re-lays out in
milliseconds. Every string from the model reaches the page through textContent, never as
markup."""

SCRIPT = r"""
(function () {
"use strict";
const DATA = JSON.parse(document.getElementById("irb-data").textContent);
const N = DATA.nodes, E = DATA.edges, K = DATA.kernels, M = DATA.model;
const SVGNS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- formatting
function si(v, unit) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  const steps = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [f, p] of steps) if (a >= f) return (v / f).toPrecision(3) + " " + p + (unit || "");
  return String(Math.round(v * 100) / 100) + (unit ? " " + unit : "");
}
function bytes(v) {
  if (v === null || v === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, x = v;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return (i ? x.toPrecision(3) : String(x)) + " " + units[i];
}
function secs(v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  if (v === 0) return "0 s";
  const a = Math.abs(v);
  if (a >= 1) return v.toPrecision(3) + " s";
  if (a >= 1e-3) return (v * 1e3).toPrecision(3) + " ms";
  if (a >= 1e-6) return (v * 1e6).toPrecision(3) + " µs";
  return (v * 1e9).toPrecision(3) + " ns";
}
const int = (v) => Number(v).toLocaleString("en-US");
const pct = (v) => (v * 100).toFixed(1) + "%";
function clip(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "…" : s; }
const short = (cls) => cls ? cls.split(".").pop() : "";

// ---------------------------------------------------------------- module tree
// A group is a module path prefix holding at least two nodes; chains of groups with no
// nodes of their own and one child merge ("encoder.layer"), so every level means something.
const root = {key: "", name: M.name, kids: [], leaves: [], parent: null, depth: 0, count: 0};
const byKey = new Map([["", root]]);
const home = new Array(N.length);
N.forEach((n, i) => {
  let g = root;
  g.count++;
  for (const seg of n.ns) {
    const key = g.key + "\u0000" + seg;
    let c = byKey.get(key);
    if (!c) {
      c = {key: key, name: seg, kids: [], leaves: [], parent: g, count: 0};
      byKey.set(key, c); g.kids.push(c);
    }
    c.count++; g = c;
  }
  g.leaves.push(i);
});
(function prune(g) {
  for (const c of g.kids.slice()) prune(c);
  // Dissolve a group of fewer than two nodes, or of one op repeated (a module called
  // several times, like ResNet's shared ReLU): as a box it would only hide the dataflow.
  const same = !g.kids.length && g.leaves.every((i) => N[i].op === N[g.leaves[0]].op);
  if (g.parent && (g.count < 2 || same)) {
    g.parent.leaves.push(...g.leaves);
    g.parent.kids.splice(g.parent.kids.indexOf(g), 1);
  }
})(root);
(function merge(g) {
  if (g.parent) {
    while (g.leaves.length === 0 && g.kids.length === 1) {
      const c = g.kids[0];
      g.name += "." + c.name; g.kids = c.kids; g.leaves = c.leaves;
      for (const k of g.kids) k.parent = g;
    }
  }
  for (const c of g.kids) merge(c);
})(root);
const groups = [];
let maxDepth = 0;
(function finish(g, depth, path) {
  g.depth = depth; g.path = path; g.all = g.leaves.slice();
  g.ns = g.parent ? g.parent.ns.concat(g.name.split(".")) : [];
  g.id = groups.length; groups.push(g);
  maxDepth = Math.max(maxDepth, depth);
  for (const i of g.leaves) home[i] = g;
  for (const c of g.kids) {
    finish(c, depth + 1, depth ? path + "." + c.name : c.name);
    g.all.push(...c.all);
  }
  g.all.sort((a, b) => a - b);
  g.min = g.all.length ? g.all[0] : 0;
})(root, 0, "");
const chain = N.map((_, i) => {  // groups from the top level down to the node's own
  const out = [];
  for (let g = home[i]; g !== root; g = g.parent) out.unshift(g);
  return out;
});
// Aggregates per group for colour and details.
const opNodes = N.filter((n) => n.kind === "op");
const kernelOf = (n) => (n.k === null || n.k === undefined) ? null : K[n.k];
for (const g of groups) {
  let flops = 0, lat = 0, comp = 0, mem = 0, ops = 0;
  const hist = new Map(), cls = new Map(), cats = new Map();
  for (const i of g.all) {
    const n = N[i];
    if (n.kind !== "op") continue;
    ops++;
    flops += n.cost ? n.cost.flops : 0; lat += n.lat || 0;
    comp += n.comp || 0; mem += n.mem || 0;
    hist.set(n.op, (hist.get(n.op) || 0) + 1);
    if (n.cat !== "shape" && n.cat !== "constant") cats.set(n.cat, (cats.get(n.cat) || 0) + 1);
    if (n.cls && n.ns.join(".") === g.ns.join(".")) cls.set(n.cls, (cls.get(n.cls) || 0) + 1);
  }
  const top = (m) => [...m.entries()].sort((a, b) => b[1] - a[1]);
  g.agg = {flops, lat, comp, mem, ops, hist: top(hist),
           cls: top(cls).length ? short(top(cls)[0][0]) : "",
           cat: top(cats).length ? top(cats)[0][0] : "shape"};
}

// ---------------------------------------------------------------- state
const state = {expanded: new Set(), color: "bound", selected: null, query: "",
               matches: new Set(), cursor: -1, view: {s: 1, tx: 0, ty: 0}};
const SIZE = {node: [172, 46], io: [150, 34], group: [206, 60]};
const GAP = {x: 26, y: 46, dummy: 10, pad: 14, title: 24};
let current = null;  // the last layout: items, edges, bounds

function rep(i) {  // the visible item that stands for node i
  for (const g of chain[i]) if (!state.expanded.has(g)) return "g" + g.id;
  return "n" + i;
}
function visibleCountAt(depth) {
  const seen = new Set();
  N.forEach((_, i) => {
    let r = "n" + i;
    for (const g of chain[i]) if (g.depth > depth) { r = "g" + g.id; break; }
    seen.add(r);
  });
  return seen.size;
}
function setDepth(depth) {
  state.expanded = new Set(groups.filter((g) => g.depth <= depth && g !== root));
}

// ---------------------------------------------------------------- layout
function itemOf(key) { return current.items.get(key); }
function makeItem(key) {
  if (key[0] === "n") {
    const i = +key.slice(1), n = N[i];
    const [w, h] = n.kind === "op" ? SIZE.node : SIZE.io;
    return {key, kind: "node", i, w, h, min: i};
  }
  const g = groups[+key.slice(1)];
  const [w, h] = SIZE.group;
  return {key, kind: "group", g, w, h, min: g.min};
}

function layoutAll() {
  const items = new Map();
  const get = (key) => { let it = items.get(key); if (!it) { it = makeItem(key); items.set(key, it); } return it; };
  const reps = N.map((_, i) => rep(i));
  reps.forEach((k) => get(k));
  // Per expanded group: its child items and the edges between them.
  const blocks = new Map();  // group -> {items:Set, edges:Map}
  const block = (g) => { let b = blocks.get(g); if (!b) { b = {g, items: new Set(), edges: new Map()}; blocks.set(g, b); } return b; };
  block(root);
  const ancestors = (key) => { const it = get(key); return it.kind === "node" ? chain[it.i] : chainOfGroup(it.g); };
  for (const key of items.keys()) {
    const anc = ancestors(key);
    let parent = root;
    for (const g of anc) { block(parent).items.add("g" + g.id); parent = g; }
    block(parent).items.add(key);
  }
  const visEdges = new Map();
  for (const [a, b, label] of E) {
    const ra = reps[a], rb = reps[b];
    if (ra === rb) continue;
    const ek = ra + ">" + rb;
    if (visEdges.has(ek)) continue;
    const A = [...ancestors(ra).map((g) => "g" + g.id), ra];
    const B = [...ancestors(rb).map((g) => "g" + g.id), rb];
    let p = 0;
    while (p < A.length && p < B.length && A[p] === B[p]) p++;
    const lca = p === 0 ? root : groups[+A[p - 1].slice(1)];
    const ca = A[p], cb = B[p];
    const bk = ca + ">" + cb;
    const bl = block(lca);
    if (!bl.edges.has(bk)) bl.edges.set(bk, {a: ca, b: cb, pts: [], back: false});
    visEdges.set(ek, {a: ra, b: rb, label, via: bl.edges.get(bk), owner: lca});
  }
  // Lay out blocks bottom-up: an expanded group is an item of its parent's block.
  const order = [...blocks.keys()].sort((x, y) => y.depth - x.depth);
  for (const g of order) {
    const bl = blocks.get(g);
    const its = [...bl.items].map((k) => {
      if (k[0] === "g" && state.expanded.has(groups[+k.slice(1)])) {
        const sub = blocks.get(groups[+k.slice(1)]);
        const it = get(k);
        it.kind = "block"; it.w = sub.w; it.h = sub.h;
        return it;
      }
      return get(k);
    });
    const size = layered(its, [...bl.edges.values()], get);
    const pad = g === root ? 0 : GAP.pad, top = g === root ? 0 : GAP.title;
    for (const it of its) { it.rx += pad; it.ry += pad + top; }
    for (const e of bl.edges.values()) for (const p of e.pts) { p[0] += pad; p[1] += pad + top; }
    bl.w = Math.max(size[0] + 2 * pad, g === root ? 0 : 180);
    bl.h = size[1] + 2 * pad + top;
    bl.its = its;
  }
  // Absolute positions, top-down.
  (function place(g, ox, oy) {
    const bl = blocks.get(g);
    bl.x = ox; bl.y = oy;
    for (const it of bl.its) {
      it.x = ox + it.rx; it.y = oy + it.ry;
      if (it.kind === "block") place(it.g, it.x, it.y);
    }
    for (const e of bl.edges.values()) e.abs = e.pts.map((p) => [p[0] + ox, p[1] + oy]);
  })(root, 0, 0);
  const rb = blocks.get(root);
  current = {items, blocks, edges: [...visEdges.values()], w: rb.w, h: rb.h,
             visible: [...items.values()].filter((it) => it.kind !== "block")};
}
function chainOfGroup(g) {
  const out = [];
  for (let p = g.parent; p && p !== root; p = p.parent) out.unshift(p);
  return out;
}

// Layered layout of one block: items with w/h, edges {a, b} by item key. Sets it.rx/it.ry
// (top-left, relative) and e.pts (bend points of long edges); returns [width, height].
function layered(items, edges, get) {
  items.sort((x, y) => x.min - y.min);
  const idx = new Map(items.map((it, j) => [it.key, j]));
  const layer = new Array(items.length).fill(0);
  const fwd = [];
  for (const e of edges) {
    const a = idx.get(e.a), b = idx.get(e.b);
    e.pts = [];
    if (a === undefined || b === undefined) continue;
    e.back = a > b;
    if (a < b) fwd.push([a, b, e]);
  }
  fwd.sort((x, y) => x[1] - y[1]);
  for (const [a, b] of fwd) layer[b] = Math.max(layer[b], layer[a] + 1);
  // Pull sources down next to their first consumer (constants, masks), keeping order.
  const succ = items.map(() => []);
  for (const [a, b] of fwd) succ[a].push(b);
  for (let j = items.length - 1; j >= 0; j--) {
    if (succ[j].length) {
      const lim = Math.min(...succ[j].map((b) => layer[b])) - 1;
      let hasPred = false;
      for (const [, b] of fwd) if (b === j) { hasPred = true; break; }
      if (!hasPred && lim > layer[j]) layer[j] = lim;
    }
  }
  // Proper graph: real items plus one dummy per layer crossed by a long edge.
  const V = items.map((it, j) => ({it, layer: layer[j], w: it.w, h: it.h, up: [], down: [], key: j}));
  for (const [a, b, e] of fwd) {
    let prev = V[a];
    e.dummies = [];
    for (let l = layer[a] + 1; l < layer[b]; l++) {
      const d = {it: null, layer: l, w: GAP.dummy, h: 0, up: [prev], down: [], key: a + 0.5};
      prev.down.push(d); V.push(d); e.dummies.push(d); prev = d;
    }
    prev.down.push(V[b]); V[b].up.push(prev);
  }
  const nl = Math.max(0, ...layer) + 1;
  const rows = Array.from({length: nl}, () => []);
  for (const v of V) rows[v.layer].push(v);
  for (const r of rows) { r.sort((x, y) => x.key - y.key); r.forEach((v, j) => { v.pos = j; }); }
  const bary = (v, dir) => {
    const nb = dir ? v.up : v.down;
    if (!nb.length) return v.pos;
    let s = 0; for (const u of nb) s += u.pos; return s / nb.length;
  };
  for (let it = 0; it < 6; it++) {
    const down = it % 2 === 0;
    const seq = down ? rows.slice(1) : rows.slice(0, -1).reverse();
    for (const r of seq) {
      const bc = new Map(r.map((v) => [v, bary(v, down)]));
      r.sort((x, y) => bc.get(x) - bc.get(y) || x.pos - y.pos);
      r.forEach((v, j) => { v.pos = j; });
    }
  }
  // y: rows stacked; x: packed, then pulled towards neighbours (balanced left/right pushes).
  let y = 0;
  for (const r of rows) {
    const hh = Math.max(0, ...r.map((v) => v.h));
    for (const v of r) { v.top = y; v.cy = v.it ? y + v.h / 2 : y + Math.min(hh, 46) / 2; }  // top-aligned rows
    y += hh + GAP.y;
  }
  const sep = (u, v) => (u.w + v.w) / 2 + (u.it && v.it ? GAP.x : GAP.dummy);
  for (const r of rows) { let x = 0; r.forEach((v, j) => { x += j ? sep(r[j - 1], v) : v.w / 2; v.cx = x; }); }
  const centre = (v, dir) => {
    const nb = dir ? v.up : v.down;
    if (!nb.length) return v.cx;
    let s = 0; for (const u of nb) s += u.cx; return s / nb.length;
  };
  for (let it = 0; it < 8; it++) {
    const down = it % 2 === 0;
    const seq = down ? rows.slice(1) : rows.slice(0, -1).reverse();
    for (const r of seq) {
      const want = r.map((v) => centre(v, down));
      const L = want.slice(), R = want.slice();
      for (let j = 1; j < r.length; j++) L[j] = Math.max(L[j], L[j - 1] + sep(r[j - 1], r[j]));
      for (let j = r.length - 2; j >= 0; j--) R[j] = Math.min(R[j], R[j + 1] - sep(r[j], r[j + 1]));
      r.forEach((v, j) => { v.cx = (L[j] + R[j]) / 2; });
    }
  }
  let minX = Infinity, maxX = -Infinity;
  for (const v of V) { minX = Math.min(minX, v.cx - v.w / 2); maxX = Math.max(maxX, v.cx + v.w / 2); }
  if (!V.length) { minX = 0; maxX = 0; }
  for (const v of V) {
    if (v.it) { v.it.rx = v.cx - v.w / 2 - minX; v.it.ry = v.top; }
  }
  for (const [, , e] of fwd) e.pts = e.dummies.map((d) => [d.cx - minX, d.cy]);
  return [maxX - minX, Math.max(0, y - GAP.y)];
}

// ---------------------------------------------------------------- colour
const CAT = {matmul: "#e15759", conv: "#f28e2b", attention: "#b07aa1", norm: "#59a14f",
  softmax: "#edc948", activation: "#76b7b2", elementwise: "#a0cbe8", reduction: "#ff9da7",
  pool: "#9c755f", shape: "#d7dbe2", data_movement: "#bab0ac", constant: "#eceef2",
  control: "#8cd17d", other: "#c7c7c7", opaque: "#4b5563", io: "#ffffff"};
// The bound colours of the Graphviz pictures (docs/viewers.md), so the viewers agree.
const BOUND = {compute: "#fdb863", memory: "#92c5de", free: "#eeeeee", none: "#ffffff"};
const RAMP = ["#fff7ec", "#fdd49e", "#fc8d59", "#d7301f", "#7f0000"];
function ramp(t) {
  t = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
  const j = Math.min(RAMP.length - 2, Math.floor(t)), f = t - j;
  const a = RAMP[j], b = RAMP[j + 1];
  const ch = (s, k) => parseInt(s.slice(1 + 2 * k, 3 + 2 * k), 16);
  const mix = [0, 1, 2].map((k) => Math.round(ch(a, k) + (ch(b, k) - ch(a, k)) * f));
  return "#" + mix.map((c) => c.toString(16).padStart(2, "0")).join("");
}
function boundOf(it) {
  if (it.kind === "node") {
    const n = N[it.i];
    if (n.kind !== "op") return "io";
    if (!n.known) return "none";
    if (n.comp > 0 || n.mem > 0) return n.comp >= n.mem ? "compute" : "memory";
    return "free";
  }
  const a = it.g.agg;
  if (a.comp === 0 && a.mem === 0) return "free";
  return a.comp >= a.mem ? "compute" : "memory";
}
const latOf = (it) => it.kind === "node" ? (N[it.i].lat || 0) : it.g.agg.lat;
function fillOf(it, maxLat) {
  if (it.kind === "node" && N[it.i].kind !== "op") return CAT.io;
  const unknown = it.kind === "node" && !N[it.i].known;
  if (state.color === "bound") return unknown ? BOUND.none : BOUND[boundOf(it)] || BOUND.none;
  if (state.color === "latency") {
    if (unknown) return "#f4f5f7";
    const v = latOf(it);
    if (!(v > 0) || !(maxLat > 0)) return "#f4f5f7";
    return ramp(1 - Math.log(maxLat / v) / Math.log(maxLat / current.minLat || 10));
  }
  return CAT[it.kind === "node" ? N[it.i].cat : it.g.agg.cat] || CAT.other;
}
function inkOn(hex) {
  const c = [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16) / 255);
  return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2] < 0.5 ? "#ffffff" : "#1d2430";
}

// ---------------------------------------------------------------- drawing
function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVGNS, tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(el);
  return el;
}
function text(parent, x, y, cls, s) {
  const t = svg("text", {x, y, class: cls}, parent);
  t.textContent = s;
  return t;
}
function labelOf(it) {
  if (it.kind === "node") {
    const n = N[it.i];
    if (n.kind !== "op") return [n.op + " " + n.label, (n.outs || n.ins)[0][1], ""];
    const where = n.ns.slice(home[it.i].ns.length).join(".");  // a dissolved module's name
    return [n.op, n.outs.length ? n.outs[0][1] : "", where];
  }
  const g = it.g, a = g.agg;
  return ["▸ " + g.name, (a.cls ? a.cls + " · " : "") + a.ops + " ops",
          si(a.flops, "FLOPs") + " · " + secs(a.lat)];
}
function pathThrough(pts) {
  let d = "M" + pts[0][0] + "," + pts[0][1];
  for (let j = 1; j < pts.length; j++) {
    const [x0, y0] = pts[j - 1], [x1, y1] = pts[j];
    const dy = Math.max(12, (y1 - y0) / 2);
    d += " C" + x0 + "," + (y0 + dy) + " " + x1 + "," + (y1 - dy) + " " + x1 + "," + y1;
  }
  return d;
}
function draw() {
  const blocksG = $("blocks"), edgesG = $("edges"), nodesG = $("nodes");
  blocksG.textContent = ""; edgesG.textContent = ""; nodesG.textContent = "";
  for (const [g, bl] of current.blocks) {
    if (g === root) continue;
    const b = svg("g", {class: "block d" + Math.min(3, g.depth), "data-group": g.path}, blocksG);
    svg("rect", {x: bl.x, y: bl.y, width: bl.w, height: bl.h, rx: 10}, b);
    const t = text(b, bl.x + 10, bl.y + 17, "title",
                   clip("▾ " + g.name + (g.agg.cls ? "  (" + g.agg.cls + ")" : "") + " · " + g.agg.ops + " ops", Math.max(12, bl.w / 6.6)));
    t.addEventListener("click", (ev) => { ev.stopPropagation(); toggle(g); });
    const tip = svg("title", {}, t); tip.textContent = g.path + " — click to collapse";
  }
  for (const e of current.edges) {
    const a = itemOf(e.a), b = itemOf(e.b);
    const start = [a.x + a.w / 2, a.y + a.h], end = [b.x + b.w / 2, b.y];
    const back = e.via.back || end[1] < start[1];
    const pts = back ? [start, end] : [start, ...(e.via.abs || []), end];
    const p = svg("path", {d: pathThrough(pts), class: "edge" + (back ? " back" : ""),
                           "marker-end": "url(#arrow)"}, edgesG);
    p.dataset.a = e.a; p.dataset.b = e.b;
    const tip = svg("title", {}, p); tip.textContent = e.label;
  }
  // The latency colours span the visible items' range, log scale (at most 4 decades).
  let maxLat = 0, minLat = Infinity;
  for (const it of current.visible) { const v = latOf(it); if (v > 0) { maxLat = Math.max(maxLat, v); minLat = Math.min(minLat, v); } }
  current.maxLat = maxLat;
  current.minLat = Math.max(minLat === Infinity ? maxLat : minLat, maxLat / 1e4);
  if (current.minLat >= maxLat) current.minLat = maxLat / 10;
  for (const it of current.visible) {
    const isGroup = it.kind === "group";
    const n = isGroup ? null : N[it.i];
    const cls = "node" + (isGroup ? " group" : "") + (n && n.kind !== "op" ? " io" : "");
    const g = svg("g", {class: cls, transform: "translate(" + it.x + "," + it.y + ")"}, nodesG);
    g.dataset.key = it.key;
    if (isGroup) g.dataset.group = it.g.path; else { g.dataset.index = it.i; g.dataset.viewKey = n.key; if (n.kind === "op") { g.dataset.id = n.id; g.dataset.op = n.op; } }
    if (isGroup) svg("rect", {class: "shadow", x: 4, y: 4, width: it.w, height: it.h, rx: 8}, g);
    const rect = svg("rect", {class: "box", width: it.w, height: it.h,
                              rx: n && n.kind !== "op" ? it.h / 2 : (isGroup ? 8 : 6)}, g);
    const [l1, l2, l3] = labelOf(it);
    const chars = Math.floor((it.w - 16) / 7.2);
    if (isGroup || (n && n.kind === "op")) {
      text(g, 8, 18, "t1", clip(l1, chars - 1));
      text(g, 8, 32, "t2", clip(l2, Math.floor((it.w - 16) / 6.7)));
      if (isGroup) text(g, 8, 50, "t3", clip(l3, chars + 2));
      else if (l3 && l3 !== l1) {
        const room = chars - l1.length - 2;
        if (room > 3) { const t = text(g, it.w - 8, 18, "t3", clip(l3, room)); t.setAttribute("text-anchor", "end"); t.setAttribute("opacity", "0.75"); }
      }
    } else {
      text(g, it.w / 2, 21, "t3", clip(l1, chars + 2)).setAttribute("text-anchor", "middle");
    }
    const tip = svg("title", {}, g);
    tip.textContent = isGroup ? it.g.path + " — double-click to expand"
      : (n.kind === "op" ? n.op + (n.path ? " @ " + n.path : "") + "\n" + n.outs.map((o) => o[1]).join(", ") : n.op + " " + n.label);
    it.el = g; it.rect = rect;
  }
  paint();
}
function paint() {
  for (const it of current.visible) {
    const f = fillOf(it, current.maxLat);
    it.rect.setAttribute("fill", f);
    const ink = inkOn(f);
    for (const t of it.el.querySelectorAll("text")) if (!t.classList.contains("badge-t")) t.setAttribute("fill", ink);
  }
  legend();
  highlight();
}
function legend() {
  const L = $("legend");
  L.textContent = "";
  const sw = (color, label) => {
    const s = document.createElement("span");
    const b = document.createElement("span"); b.className = "sw"; b.style.background = color;
    s.appendChild(b); s.appendChild(document.createTextNode(label)); L.appendChild(s);
  };
  if (state.color === "bound") {
    const head = document.createElement("b"); head.textContent = "Roofline bound on " + M.target + " (" + M.dtype + "):"; L.appendChild(head);
    sw(BOUND.compute, "compute"); sw(BOUND.memory, "memory"); sw(BOUND.free, "no time (views, constants)"); sw(BOUND.none, "unknown");
  } else if (state.color === "latency") {
    const head = document.createElement("b"); head.textContent = "Latency share on " + M.target + ":"; L.appendChild(head);
    const s = document.createElement("span");
    s.appendChild(document.createTextNode(secs(current.minLat)));
    const r = document.createElement("span"); r.className = "ramp";
    r.style.background = "linear-gradient(to right, " + RAMP.join(", ") + ")";
    s.appendChild(r); s.appendChild(document.createTextNode(secs(current.maxLat) + " (log)"));
    L.appendChild(s);
  } else {
    const head = document.createElement("b"); head.textContent = "Op category:"; L.appendChild(head);
    const seen = new Set(current.visible.map((it) => it.kind === "node" ? N[it.i].cat : it.g.agg.cat));
    for (const c of Object.keys(CAT)) if (seen.has(c)) sw(CAT[c], c.replace("_", " "));
  }
}
function stats() {
  const groupsShown = current.visible.filter((it) => it.kind === "group").length;
  const nodesShown = current.visible.length - groupsShown;
  $("stats").textContent = nodesShown + " nodes and " + groupsShown + " collapsed modules shown · " + opNodes.length + " ops in all";
  document.body.dataset.visible = String(current.visible.length);
  document.body.dataset.expanded = String(state.expanded.size);
}

// ---------------------------------------------------------------- view (pan / zoom)
const svgEl = $("graph"), vp = $("viewport");
function applyView() {
  const v = state.view;
  vp.setAttribute("transform", "translate(" + v.tx + "," + v.ty + ") scale(" + v.s + ")");
}
function fit() {
  const r = svgEl.getBoundingClientRect(), m = 24;
  const w = Math.max(current.w, 1), h = Math.max(current.h, 1);
  let s = Math.min(1.2, (r.width - 2 * m) / w, (r.height - 2 * m) / h);
  let ty;
  if (s < 0.45) {  // a tall graph: fit the width, start at the top
    s = Math.min(1.2, (r.width - 2 * m) / w, 0.75);
    ty = m;
  } else {
    ty = (r.height - h * s) / 2;
  }
  state.view = {s, tx: (r.width - w * s) / 2, ty};
  applyView();
}
function zoomAt(factor, mx, my) {
  const v = state.view, ns = Math.max(0.03, Math.min(5, v.s * factor));
  v.tx = mx - (mx - v.tx) * (ns / v.s); v.ty = my - (my - v.ty) * (ns / v.s); v.s = ns;
  applyView();
}
svgEl.addEventListener("wheel", (ev) => {
  ev.preventDefault();
  const r = svgEl.getBoundingClientRect();
  zoomAt(Math.exp(-ev.deltaY * (ev.ctrlKey ? 0.01 : 0.0015)), ev.clientX - r.left, ev.clientY - r.top);
}, {passive: false});
let drag = null;
svgEl.addEventListener("pointerdown", (ev) => {
  if (ev.button !== 0) return;
  drag = {x: ev.clientX, y: ev.clientY, tx: state.view.tx, ty: state.view.ty, moved: false, id: ev.pointerId};
});
svgEl.addEventListener("pointermove", (ev) => {
  if (!drag) return;
  const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
  if (!drag.moved && Math.hypot(dx, dy) > 4) { drag.moved = true; svgEl.classList.add("panning"); svgEl.setPointerCapture(drag.id); }
  if (drag.moved) { state.view.tx = drag.tx + dx; state.view.ty = drag.ty + dy; applyView(); }
});
const endDrag = () => { svgEl.classList.remove("panning"); setTimeout(() => { drag = null; }, 0); };
svgEl.addEventListener("pointerup", endDrag);
svgEl.addEventListener("pointercancel", endDrag);
function centreOn(it) {
  const r = svgEl.getBoundingClientRect(), v = state.view;
  if (v.s < 0.6) v.s = 0.9;
  v.tx = r.width / 2 - (it.x + it.w / 2) * v.s; v.ty = r.height / 2 - (it.y + it.h / 2) * v.s;
  applyView();
}

// ---------------------------------------------------------------- interaction
$("nodes").addEventListener("click", (ev) => {
  if (drag && drag.moved) return;
  const g = ev.target.closest(".node");
  if (g) select(g.dataset.key);
});
$("nodes").addEventListener("dblclick", (ev) => {
  const g = ev.target.closest(".node");
  if (g && g.dataset.key[0] === "g") toggle(groups[+g.dataset.key.slice(1)]);
});
svgEl.addEventListener("click", (ev) => {
  if (drag && drag.moved) return;
  if (!ev.target.closest(".node") && !ev.target.closest(".block")) select(null);
});
function relayout(anchorGroup) {
  let before = null;
  if (anchorGroup) {
    const it = current.items.get("g" + anchorGroup.id);
    if (it) before = [it.x, it.y];
  }
  layoutAll(); draw(); stats();
  if (before) {
    const it = current.items.get("g" + anchorGroup.id);
    if (it) { state.view.tx += (before[0] - it.x) * state.view.s; state.view.ty += (before[1] - it.y) * state.view.s; applyView(); }
  }
  if (state.selected && !current.items.has(state.selected)) select(null);
  else if (state.selected) markSelected();
}
function toggle(g) {
  if (state.expanded.has(g)) {
    state.expanded.delete(g);
    for (const d of groups) { for (let p = d.parent; p; p = p.parent) if (p === g) state.expanded.delete(d); }
  } else state.expanded.add(g);
  syncDepth();
  relayout(g);
  if (state.selected && state.selected[0] === "g") showDetails(state.selected);
}
function syncDepth() {
  const exact = (d) => groups.every((g) => g === root || (g.depth <= d) === state.expanded.has(g));
  let value = "custom";
  for (let d = 0; d <= maxDepth; d++) if (exact(d)) { value = String(d); break; }
  $("depth").value = value;
}
function markSelected() {
  for (const it of current.visible) it.el.classList.toggle("selected", it.key === state.selected);
  for (const p of $("edges").children) p.classList.toggle("hl", p.dataset.a === state.selected || p.dataset.b === state.selected);
}
function select(key) {
  state.selected = key;
  markSelected();
  if (key) showDetails(key); else clearDetails();
}
function reveal(i) {
  for (const g of chain[i]) state.expanded.add(g);
  syncDepth();
  relayout(null);
  select("n" + i);
  centreOn(current.items.get("n" + i));
}

// ---------------------------------------------------------------- details panel
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  if (props) for (const k in props) { if (k === "data") { for (const d in props.data) e.dataset[d] = props.data[d]; } else e[k] = props[k]; }
  for (const k of kids) if (k !== null && k !== undefined) e.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
  return e;
}
function table(rows, field) {
  const t = el("table", field ? {data: {field}} : null);
  for (const r of rows) {
    if (!r) continue;
    const [k, v, f] = r;
    const td = el("td", {className: "v"}, v);
    if (f) td.dataset.field = f;
    t.appendChild(el("tr", null, el("td", {className: "k"}, k), td));
  }
  return t;
}
function nodeLink(i, label) {
  const a = el("a", {title: "show this node"}, label);
  a.addEventListener("click", () => reveal(i));
  return a;
}
function clearDetails() {
  const D = $("details");
  D.textContent = "";
  D.appendChild(el("p", {className: "hint"}, "Click a node for its shapes, provenance, cost and hardware mapping. Click a module for its totals; double-click it (or click its title when expanded) to expand or collapse. Drag to pan, wheel to zoom, / to search, f to fit."));
  D.appendChild(summary());
}
function summary() {
  const s = el("div");
  s.appendChild(el("h3", null, "Model"));
  s.appendChild(table([
    ["name", M.name], ["source", M.source || "–"], ["graphs", String(M.graphs)],
    ["ops", int(M.ops)], ["parameters", int(M.params)],
    ["FLOPs", int(M.flops) + " (" + si(M.flops) + ")"], ["MACs", si(M.macs)]]));
  s.appendChild(el("h3", null, "Hardware mapping"));
  s.appendChild(table([
    ["target", M.target + " — " + M.title], ["dtype", M.dtype], ["fusion", M.strategy],
    ["peak", si(M.peak, "FLOP/s")], ["bandwidth", si(M.bandwidth, "B/s")], ["ridge", M.ridge.toFixed(1) + " FLOPs/B"],
    ["latency", secs(M.latency) + " (kernels one after another)"], ["% of peak", pct(M.attained)],
    ["kernels", M.compute_kernels + " compute-bound, " + M.memory_kernels + " memory-bound"]]));
  if (M.warnings.length) {
    s.appendChild(el("h3", null, "Warnings"));
    for (const w of M.warnings) s.appendChild(el("pre", null, w));
  }
  return s;
}
function showDetails(key) {
  const D = $("details");
  D.textContent = "";
  if (key[0] === "g") { groupDetails(D, groups[+key.slice(1)]); return; }
  const i = +key.slice(1), n = N[i];
  D.dataset.key = key;
  if (n.kind !== "op") {
    D.appendChild(el("h2", {data: {field: "op"}}, n.op));
    D.appendChild(el("div", {className: "sub"}, n.label));
    D.appendChild(el("h3", null, "Shape"));
    D.appendChild(table([[n.label, (n.outs || n.ins)[0][1], "shape"]], "outputs"));
    return;
  }
  D.appendChild(el("h2", {data: {field: "op"}}, n.op));
  D.appendChild(el("div", {className: "sub"}, "#" + n.id + (n.name ? " " + n.name : "") + (n.path ? " · " + n.path : "")));
  // Shapes
  D.appendChild(el("h3", null, "Inputs"));
  const producers = new Map();
  for (const [a, b] of E) if (b === i) producers.set(a, true);
  const prodOf = (name) => { for (const a of producers.keys()) { const m = N[a]; if ((m.outs || []).some((o) => o[0] === name)) return a; } return -1; };
  const ins = el("table", {data: {field: "inputs"}});
  n.ins.forEach(([name, type, param]) => {
    const p = prodOf(name);
    const who = param ? el("span", {className: "mono"}, "weight") : (p >= 0 ? nodeLink(p, N[p].op) : el("span", null, ""));
    ins.appendChild(el("tr", null, el("td", {className: "k mono"}, clip(name, 28)), el("td", {className: "mono"}, type), el("td", {className: "w"}, who)));
  });
  D.appendChild(ins);
  D.appendChild(el("h3", null, "Outputs"));
  const outs = el("table", {data: {field: "outputs"}});
  for (const [name, type] of n.outs) outs.appendChild(el("tr", null, el("td", {className: "k mono"}, clip(name, 28)), el("td", {className: "mono"}, type)));
  D.appendChild(outs);
  // Provenance
  D.appendChild(el("h3", null, "Provenance"));
  D.appendChild(table([
    ["module", n.path || "(top level)", "module"], n.cls ? ["class", n.cls] : null,
    n.src ? ["source op", n.src] : null, n.srcnode ? ["source node", n.srcnode] : null,
    n.fmt ? ["format", n.fmt] : null, n.loc ? ["location", n.loc] : null]));
  if (n.code) D.appendChild(el("pre", null, n.code));
  // Cost
  D.appendChild(el("h3", null, "Cost"));
  const c = n.cost;
  if (c) {
    D.appendChild(table([
      ["FLOPs", int(c.flops), "flops"], ["", si(c.mm) + " matmul + " + si(c.other) + " other"],
      ["MACs", int(c.macs), "macs"], ["bytes read", bytes(c.read)], ["bytes written", bytes(c.written)],
      ["weights", bytes(c.params)], ["status", c.status + (c.note ? " (" + c.note + ")" : ""), "status"],
      n.body ? ["body", n.body + " nodes (counted once)"] : null]));
  } else D.appendChild(el("div", {className: "sub"}, "not costed"));
  // Hardware mapping
  D.appendChild(el("h3", null, "Hardware mapping"));
  const k = kernelOf(n);
  if (k) {
    const pill = el("span", {className: "pill", data: {field: "bound"}}, k.bound);
    pill.style.background = BOUND[k.bound] || "#999";
    pill.style.color = inkOn(BOUND[k.bound] || "#999999");
    D.appendChild(table([
      ["target", M.target + " · " + M.dtype + " · " + M.strategy],
      ["kernel", "#" + k.id + " " + k.kind + " (" + k.members.length + (k.members.length === 1 ? " op)" : " ops)"), "kernel"],
      ["bound", pill],
      ["latency", secs(k.latency) + " kernel; this op's share " + secs(n.lat), "latency"],
      ["compute", secs(k.compute)], ["memory", secs(k.memory)],
      ["intensity", k.intensity === null ? "–" : k.intensity.toFixed(1) + " FLOPs/B (ridge " + M.ridge.toFixed(1) + ")"],
      ["% of peak", pct(k.attained)], ["kernel bytes", bytes(k.ext) + " external, " + bytes(k.int) + " on chip"]]));
    if (k.members.length > 1) {
      const list = el("div", {className: "sub"}, "fused with: ");
      const ids = new Map(opNodes.map((m) => [m.id, m.i]));
      k.members.filter((m) => m !== n.id).slice(0, 12).forEach((m, j) => {
        if (j) list.appendChild(document.createTextNode(", "));
        list.appendChild(nodeLink(ids.get(m), "#" + m + " " + N[ids.get(m)].op));
      });
      D.appendChild(list);
    }
    D.appendChild(el("pre", null, k.reason));
  } else D.appendChild(el("div", {className: "sub"}, "not in a kernel"));
  if (n.attrs.length) {
    D.appendChild(el("h3", null, "Attributes"));
    D.appendChild(table(n.attrs.map(([a, v]) => [a, el("span", {className: "mono"}, v)]), "attrs"));
  }
  const parent = chain[i].length ? chain[i][chain[i].length - 1] : null;
  if (parent) {
    const b = el("button", {type: "button"}, "Collapse " + parent.path);
    b.addEventListener("click", () => { toggle(parent); select("g" + parent.id); });
    D.appendChild(b);
  }
}
function groupDetails(D, g) {
  const a = g.agg;
  D.dataset.key = "g" + g.id;
  D.appendChild(el("h2", {data: {field: "op"}}, g.name));
  D.appendChild(el("div", {className: "sub"}, "module " + g.path + (a.cls ? " (" + a.cls + ")" : "")));
  const open = state.expanded.has(g);
  const b = el("button", {type: "button", id: "toggle-group"}, open ? "Collapse" : "Expand");
  b.addEventListener("click", () => toggle(g));
  D.appendChild(b);
  D.appendChild(el("h3", null, "Totals"));
  D.appendChild(table([
    ["ops", int(a.ops), "ops"], ["FLOPs", int(a.flops), "flops"],
    ["latency share", secs(a.lat) + " (" + (M.latency > 0 ? pct(a.lat / M.latency) : "–") + " of model)"],
    ["compute-bound", secs(a.comp)], ["memory-bound", secs(a.mem)]]));
  D.appendChild(el("h3", null, "Ops"));
  D.appendChild(table(a.hist.slice(0, 16).map(([op, c]) => [op, "× " + c])));
}

// ---------------------------------------------------------------- search
function runSearch() {
  const q = state.query.trim().toLowerCase();
  state.matches = new Set();
  if (q) {
    const exactOp = q.startsWith("op:") ? q.slice(3).trim() : null;
    N.forEach((n, i) => {
      if (exactOp !== null) { if (n.kind === "op" && n.op.toLowerCase() === exactOp) state.matches.add(i); return; }
      const hay = [n.op, n.label, n.name || "", n.path || "", n.srcnode || ""].join(" ").toLowerCase();
      if (hay.includes(q)) state.matches.add(i);
    });
  }
  state.cursor = -1;
  highlight();
}
function highlight() {
  let shown = 0;
  for (const it of current.visible) {
    const old = it.el.querySelector(".badge-g");
    if (old) old.remove();
    let hit = false;
    if (it.kind === "node") { hit = state.matches.has(it.i); if (hit) shown++; }
    else if (state.matches.size) {
      let c = 0; for (const i of it.g.all) if (state.matches.has(i)) c++;
      if (c) {
        hit = true;
        const bg = svg("g", {class: "badge-g"}, it.el);
        svg("circle", {class: "badge", cx: it.w - 2, cy: 2, r: 11}, bg);
        const t = text(bg, it.w - 2, 6, "badge-t", String(c)); t.setAttribute("text-anchor", "middle");
      }
    }
    it.el.classList.toggle("match", hit);
  }
  const st = $("search-status");
  st.dataset.count = String(state.matches.size);
  st.dataset.shown = String(shown);
  st.textContent = state.query.trim() ? state.matches.size + " match" + (state.matches.size === 1 ? "" : "es") + (state.matches.size && shown < state.matches.size ? " (" + shown + " shown; Enter reveals)" : "") : "";
}
$("search").addEventListener("input", (ev) => { state.query = ev.target.value; runSearch(); });
$("search").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && state.matches.size) {
    const list = [...state.matches].sort((a, b) => a - b);
    state.cursor = (state.cursor + 1) % list.length;
    reveal(list[state.cursor]);
    highlight();
  } else if (ev.key === "Escape") { ev.target.value = ""; state.query = ""; runSearch(); ev.target.blur(); }
});

// ---------------------------------------------------------------- controls
$("color-by").addEventListener("change", (ev) => { state.color = ev.target.value; document.body.dataset.color = state.color; paint(); });
$("depth").addEventListener("change", (ev) => {
  if (ev.target.value === "custom") return;
  setDepth(+ev.target.value); relayout(null); fit(); syncDepth();
});
$("collapse-all").addEventListener("click", () => { setDepth(0); syncDepth(); relayout(null); fit(); });
$("expand-all").addEventListener("click", () => { setDepth(maxDepth); syncDepth(); relayout(null); fit(); });
$("fit").addEventListener("click", fit);
document.addEventListener("keydown", (ev) => {
  if (ev.target instanceof HTMLInputElement || ev.target instanceof HTMLSelectElement) return;
  if (ev.key === "/") { ev.preventDefault(); $("search").focus(); }
  else if (ev.key === "f") fit();
  else if (ev.key === "Escape") select(null);
});

// ---------------------------------------------------------------- start
$("model-name").textContent = M.name;
$("model-summary").textContent = int(M.ops) + " ops · " + si(M.flops, "FLOPs") + " · " +
  M.target + " " + M.dtype + " · " + secs(M.latency) + " · " + M.compute_kernels + " compute- / " + M.memory_kernels + " memory-bound kernels";
const dsel = $("depth");
for (let d = 0; d <= maxDepth; d++) dsel.appendChild(el("option", {value: String(d)}, d === maxDepth ? d + " (all)" : String(d)));
dsel.appendChild(el("option", {value: "custom", disabled: true}, "custom"));
// Start collapsed to the deepest module depth that keeps the graph readable.
const BUDGET = 80;
let start = 0;
while (start < maxDepth && visibleCountAt(start + 1) <= BUDGET) start++;
setDepth(start);
document.body.dataset.startDepth = String(start);
document.body.dataset.color = state.color;
syncDepth();
layoutAll(); draw(); stats(); fit(); clearDetails();
// For scripts and tests: centre an item ("n<index>" or "g<group>") without selecting it.
window.irbViewer = {groups, state, focus: (key) => centreOn(current.items.get(key)),
                    visibleKeys: () => current.visible.map((it) => it.key)};
document.body.dataset.ready = "1";
})();
"""
