// lemongraph UI: the milestone graph of a job's page (drawGraph), drawn as SVG from the
// job view the API serves. Loaded before app.js, whose helpers (s, h) it calls.
"use strict";

// The milestone graph: a column per depth, a row per place in it. An edge between
// adjacent columns is a curve across the gap between them. An edge that skips columns
// would cross the boxes in between and read as a dependency that is not there, so it
// goes around them: out into the gap after its need, along a gutter between rows (on a
// lane of its own), and in from the gap before its milestone (docs/playbooks.md,
// "The frontier").
const GRAPH = { W: 190, H: 60, GX: 70, GY: 22, PAD: 16, LANE: 6, R: 6 };

// The gutter below row g - 1 (g = 1 .. rows; gutter `rows` is below the last row)
// nearest to both ends of an edge between rows r1 and r2; the upper one on a tie.
function nearestGutter(r1, r2, rows) {
  let best = 1;
  for (let g = 2; g <= rows; g++) {
    if (Math.abs(g - 0.5 - r1) + Math.abs(g - 0.5 - r2) < Math.abs(best - 0.5 - r1) + Math.abs(best - 0.5 - r2)) best = g;
  }
  return best;
}

// Where each milestone's box goes, every need as an edge (a skipping one with its
// gutter and lane), and the drawing's size.
function graphLayout(job) {
  const { W, H, GX, GY, PAD, LANE } = GRAPH;
  const columns = new Map(), place = new Map();
  for (const m of job.milestones) {
    if (!columns.has(m.depth)) columns.set(m.depth, []);
    place.set(m.id, { depth: m.depth, row: columns.get(m.depth).length });
    columns.get(m.depth).push(m);
  }
  const rows = Math.max(1, ...[...columns.values()].map((list) => list.length));
  const edges = [], lanes = new Array(rows + 1).fill(0);
  for (const m of job.milestones) {
    for (const need of m.needs) {
      const a = place.get(need), b = place.get(m.id);
      if (!a) continue;
      const gutter = b.depth - a.depth > 1 ? nearestGutter(a.row, b.row, rows) : 0;
      edges.push({ from: need, to: m.id, gutter, lane: gutter ? lanes[gutter]++ : 0 });
    }
  }
  // a gutter with lanes is tall enough for them; the one below the last row is there
  // only when an edge runs along it
  const gap = (g) => g === rows ? (lanes[g] ? (lanes[g] + 1) * LANE : 0) : Math.max(GY, (lanes[g] + 1) * LANE);
  const rowY = [PAD];
  for (let r = 1; r <= rows; r++) rowY.push(rowY[r - 1] + H + gap(r));
  const pos = new Map();
  for (const [id, p] of place) pos.set(id, { x: PAD + p.depth * (W + GX), y: rowY[p.row] });
  const laneY = (g, lane) => rowY[g] - gap(g) / 2 + (lane - (lanes[g] - 1) / 2) * LANE;
  return { pos, edges, laneY, width: PAD * 2 + columns.size * (W + GX) - GX, height: rowY[rows] + PAD };
}

// A polyline with its corners rounded (radius r at most, less on short segments).
function roundedPath(points, r) {
  let d = `M${points[0].x},${points[0].y}`;
  for (let i = 1; i < points.length - 1; i++) {
    const p = points[i - 1], c = points[i], n = points[i + 1];
    const before = Math.hypot(c.x - p.x, c.y - p.y), after = Math.hypot(n.x - c.x, n.y - c.y);
    const k = Math.min(r, before / 2, after / 2);
    const a = [c.x - (c.x - p.x) / before * k, c.y - (c.y - p.y) / before * k];
    const b = [c.x + (n.x - c.x) / after * k, c.y + (n.y - c.y) / after * k];
    d += ` L${a[0]},${a[1]} Q${c.x},${c.y} ${b[0]},${b[1]}`;
  }
  const last = points[points.length - 1];
  return `${d} L${last.x},${last.y}`;
}

// An edge from its need's right side to its milestone's left side; `shift` keeps the
// vertical runs of skipping edges apart in the column gaps.
function edgePath(layout, edge, shift) {
  const { W, H, GX, R } = GRAPH;
  const from = layout.pos.get(edge.from), to = layout.pos.get(edge.to);
  const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x, y2 = to.y + H / 2;
  if (!edge.gutter) return `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`;
  const y = layout.laneY(edge.gutter, edge.lane), out = x1 + GX / 2 + shift, into = x2 - GX / 2 + shift;
  return roundedPath([{ x: x1, y: y1 }, { x: out, y: y1 }, { x: out, y }, { x: into, y },
    { x: into, y: y2 }, { x: x2, y: y2 }], R);
}

function graphNode(job, m, at) {
  const { W, H } = GRAPH;
  const deadline = m.state === "open" && m.deadline;
  const held = heldBack(job, m);
  return s("g", { class: `node state-${m.state}${m.next_best ? " next" : ""}${held ? " held" : ""}`,
    "data-milestone": m.id, "data-state": m.state, transform: `translate(${at.x},${at.y})` },
    s("title", {}, `${m.id}: ${m.state}${held ? " (task held back by due)" : ""}${m.condition ? " — " + m.condition : ""}`),
    s("rect", { width: W, height: H, rx: 8 }),
    s("text", { x: 10, y: 20 }, m.id),
    m.next_best ? s("text", { class: "star", x: W - 22, y: 20 }, "★") : null,
    s("text", { class: "sub", x: 10, y: 40 }, m.state + (m.merge === "any" && m.needs.length > 1 ? " · any" : "")),
    held ? s("text", { class: "sub held", x: 10, y: 55 }, "task held (due)") : null,
    deadline ? s("text", { class: "sub countdown", x: 72, y: 40, "data-deadline": m.deadline }, countdown(m.deadline)) : null);
}

function drawGraph(job) {
  const svg = document.getElementById("graph");
  const layout = graphLayout(job);
  svg.setAttribute("viewBox", `0 0 ${Math.max(layout.width, 200)} ${layout.height}`);
  svg.style.maxHeight = Math.max(layout.height, 120) + "px";
  const skipping = layout.edges.filter((e) => e.gutter);
  const room = GRAPH.GX / 2 - 2 * GRAPH.R - 2;
  const edges = layout.edges.map((e) => {
    const shift = e.gutter ? (skipping.indexOf(e) - (skipping.length - 1) / 2) * GRAPH.LANE : 0;
    return s("path", { class: "edge", "data-from": e.from, "data-to": e.to, "marker-end": "url(#arrow)",
      d: edgePath(layout, e, Math.max(-room, Math.min(room, shift))) });
  });
  const nodes = job.milestones.map((m) => graphNode(job, m, layout.pos.get(m.id)));
  const defs = s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#b4b4ad" })));
  svg.replaceChildren(defs, ...edges, ...nodes);
}
