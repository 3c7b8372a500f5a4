"""The viewer's stylesheet and static markup, inlined into every page (no files to ship)."""

STYLE = r"""
:root { --bar: #1f2633; --bg: #f6f7f9; --panel: #ffffff; --line: #d9dde3; --ink: #1d2430;
  --muted: #667085; --accent: #2563eb; --match: #e11d48; --sel: #111827; }
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; font: 13px/1.35 system-ui, -apple-system, "Segoe UI",
  Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--ink); background: var(--bg); }
body { display: flex; flex-direction: column; overflow: hidden; }
#bar { background: var(--bar); color: #e8ecf2; padding: 8px 12px; display: flex;
  flex-wrap: wrap; gap: 6px 18px; align-items: center; }
#bar .title { display: flex; gap: 10px; align-items: baseline; min-width: 0; }
#model-name { font-size: 15px; font-weight: 650; white-space: nowrap; }
#model-summary { color: #aeb8c6; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#bar .controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin-left: auto; }
#bar label { color: #aeb8c6; display: flex; gap: 5px; align-items: center; }
#bar input, #bar select, #bar button { font: inherit; border-radius: 5px; border: 1px solid #4a5568;
  background: #2c3545; color: #eef2f7; padding: 4px 8px; }
#bar input { width: 230px; }
#bar button { cursor: pointer; }
#bar button:hover { background: #3a4557; }
#search-status { color: #fbcfe8; min-width: 90px; font-variant-numeric: tabular-nums; }
main { flex: 1; display: flex; min-height: 0; }
#canvas { flex: 1; position: relative; min-width: 0; background:
  radial-gradient(circle, #dfe3e8 1px, transparent 1px) 0 0 / 22px 22px, var(--bg); }
#graph { width: 100%; height: 100%; display: block; cursor: grab; user-select: none; }
#graph.panning { cursor: grabbing; }
#details { width: 380px; background: var(--panel); border-left: 1px solid var(--line);
  overflow-y: auto; padding: 12px 14px 24px; }
#details .hint { color: var(--muted); }
#details h2 { margin: 2px 0 2px; font-size: 17px; word-break: break-all; }
#details .sub { color: var(--muted); margin-bottom: 8px; word-break: break-all; }
#details h3 { margin: 14px 0 5px; font-size: 11px; text-transform: uppercase;
  letter-spacing: .06em; color: var(--muted); border-bottom: 1px solid var(--line);
  padding-bottom: 3px; }
#details table { border-collapse: collapse; width: 100%; }
#details td { padding: 2px 6px 2px 0; vertical-align: top; word-break: break-all; }
#details td.w { white-space: nowrap; width: 1%; }
#details td.k { color: var(--muted); white-space: nowrap; width: 1%; word-break: normal; }
#details .mono, #details pre { font: 12px/1.35 ui-monospace, SFMono-Regular, Menlo, Consolas,
  monospace; }
#details pre { background: #f3f4f6; padding: 6px; border-radius: 4px; white-space: pre-wrap;
  word-break: break-all; margin: 4px 0; }
#details button { font: inherit; margin: 8px 6px 0 0; padding: 4px 10px; border-radius: 5px;
  border: 1px solid var(--line); background: #f3f4f6; cursor: pointer; }
#details button:hover { background: #e5e7eb; }
#details a { color: var(--accent); cursor: pointer; text-decoration: none; }
.pill { display: inline-block; padding: 0 7px; border-radius: 9px; color: #fff; font-size: 11px;
  font-weight: 600; }
#legend { position: absolute; left: 10px; bottom: 10px; background: rgba(255,255,255,.93);
  border: 1px solid var(--line); border-radius: 6px; padding: 6px 9px; font-size: 12px;
  max-width: 60%; display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: center; }
#legend .sw { display: inline-block; width: 12px; height: 12px; border-radius: 3px;
  border: 1px solid rgba(0,0,0,.2); vertical-align: -2px; margin-right: 4px; }
#legend .ramp { width: 120px; height: 10px; border-radius: 3px; display: inline-block;
  vertical-align: -1px; margin: 0 5px; }
#stats { position: absolute; right: 10px; bottom: 10px; background: rgba(255,255,255,.93);
  border: 1px solid var(--line); border-radius: 6px; padding: 4px 9px; font-size: 12px;
  color: var(--muted); }
.node rect.box { stroke: #48505e; stroke-width: 1; }
.node { cursor: pointer; }
.node text { pointer-events: none; }
.node .t1 { font-size: 13px; font-weight: 650; }
.node .t2 { font: 11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.node .t3 { font-size: 11px; }
.node.io rect.box { stroke-dasharray: 4 3; }
.node.group rect.box { stroke-width: 1.5; }
.node.group rect.shadow { fill: none; stroke: #48505e; stroke-width: 1; opacity: .55; }
.node.match rect.box { stroke: var(--match); stroke-width: 3.5; }
.node.selected rect.box { stroke: var(--sel); stroke-width: 3; }
.node.selected.match rect.box { stroke: var(--match); stroke-width: 4; }
.node .badge { fill: var(--match); }
.node .badge-t { fill: #fff; font-size: 11px; font-weight: 700; }
.node:hover rect.box { filter: brightness(1.06); }
.block rect { fill: rgba(120,135,160,.07); stroke: #aab3c2; stroke-width: 1; }
.block.d2 rect { fill: rgba(120,135,160,.09); }
.block.d3 rect { fill: rgba(120,135,160,.11); }
.block .title { font-size: 12px; font-weight: 600; fill: #475467; cursor: pointer; }
.block .title:hover { fill: var(--accent); }
.edge { fill: none; stroke: #8a94a6; stroke-width: 1.3; }
.edge.back { stroke-dasharray: 5 4; }
.edge.hl { stroke: var(--sel); stroke-width: 2.2; }
#arrow path { fill: #8a94a6; }
"""

BODY = r"""
<header id="bar">
  <div class="title"><span id="model-name"></span><span id="model-summary"></span></div>
  <div class="controls">
    <input id="search" type="search" placeholder="Search name or module, or op:conv"
      aria-label="Search nodes" autocomplete="off">
    <span id="search-status" data-count="0"></span>
    <label>Colour by <select id="color-by" aria-label="Colour by">
      <option value="bound">bound (roofline)</option>
      <option value="latency">latency</option>
      <option value="category">op category</option>
    </select></label>
    <label>Depth <select id="depth" aria-label="Module depth"></select></label>
    <button id="collapse-all" type="button">Collapse all</button>
    <button id="expand-all" type="button">Expand all</button>
    <button id="fit" type="button" title="Fit to window (f)">Fit</button>
  </div>
</header>
<main>
  <div id="canvas">
    <svg id="graph" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="model graph">
      <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
        markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>
      <g id="viewport"><g id="blocks"></g><g id="edges"></g><g id="nodes"></g></g>
    </svg>
    <div id="legend"></div>
    <div id="stats"></div>
  </div>
  <aside id="details"><p class="hint">Click a node for its shapes, provenance, cost and
    hardware mapping. Click a module to see its totals; double-click it (or its title when
    expanded) to expand or collapse. Drag to pan, wheel to zoom, <b>/</b> to search,
    <b>f</b> to fit.</p></aside>
</main>
"""
