// The tree of agents as SVG (laid out by the vendored d3-hierarchy), with the messages between
// siblings as arrows. Nodes are buttons: click, or Tab and Enter; arrow keys move between them.
import { agentName, clip, endingWord, lookOf, plural, stepsText, usd, duration, waitingWord } from "./format.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const NODE_W = 200;
const NODE_H = 92;
const GAP_X = 22;
const GAP_Y = 80;
// A card's text starts after its stripe (or dot) and stops this far from its right border.
const PAD_RIGHT = 12;
const TEXT_W = NODE_W - 18 - PAD_RIGHT;
const measure = document.createElement("canvas").getContext("2d");

function svg(tag, attributes) {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes || {})) element.setAttribute(name, value);
  return element;
}

/** `text` then `tail` as they fit `width` pixels in `element`'s font, `text` cut with an
 * ellipsis: words of the same length differ in width ("waiting · for messages" ran into the
 * card's border). The tail (a cost) is never cut. Measured on a canvas, since the tree may be
 * hidden (a phone shows the list), where SVG measures nothing. */
function fitted(element, text, width, tail = "") {
  text = clip(text, 60); // a node holds far less: no 500-character query measured letter by letter
  const style = getComputedStyle(element);
  measure.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const fits = (line) => measure.measureText(line + tail).width <= width;
  if (fits(text)) return text + tail;
  let end = text.length;
  while (end > 1 && !fits(`${text.slice(0, end).trimEnd()}…`)) end -= 1;
  return `${text.slice(0, end).trimEnd()}…${tail}`;
}

export function kindBadge(run) {
  if (!run.kind) return "";
  return run.tier ? `${clip(run.kind, 10)} · ${clip(run.tier, 6)}` : clip(run.kind, 12);
}

/** What an agent does now (active) or how it ended, in a few words. */
export function doingText(run) {
  if (!run.active) return endingWord(run);
  if (run.status === "paused") return waitingWord(run);
  return run.detail ? `${run.state} · ${run.detail}` : run.state;
}

export function runLabel(state, run) {
  const doing = run.active ? doingText(run) + (run.status === "paused" ? "" : `, ${run.status}`) : endingWord(run);
  const kind = run.kind ? `, ${run.kind}${run.tier ? ` on tier ${run.tier}` : ""}` : "";
  const calls = run.tool_calls != null ? ` with ${plural(run.tool_calls, "tool call")}` : "";
  const seconds = state.workedSeconds(run);
  const ended = seconds != null && !run.active ? `, worked ${duration(seconds)}${calls}` : "";
  const resumed = run.resumed ? ", resumed from its last completed step" : "";
  return (
    `${agentName(run)}${kind} (${run.model})${resumed}: ${doing}, ${stepsText(run)}, ${usd(run.cost_usd)}${ended}` +
    (run.id === state.selected ? ", selected" : "")
  );
}

export function createTree(state, elements, onSelect) {
  const { tree, links, arrows, nodes } = elements;
  const freshArrows = new Set();

  function layout() {
    // Keep only runs whose parents the page holds (always all of them, in sequence order).
    const known = new Set();
    const rows = [];
    for (const run of state.list()) {
      if (run.parent_id === null ? run.id === state.root : known.has(run.parent_id)) {
        known.add(run.id);
        rows.push(run);
      }
    }
    if (!rows.length) return null;
    const root = d3
      .stratify()
      .id((run) => String(run.id))
      .parentId((run) => (run.parent_id === null ? null : String(run.parent_id)))(rows);
    root.sort((a, b) => a.data.id - b.data.id);
    d3.tree()
      .nodeSize([NODE_W + GAP_X, NODE_H + GAP_Y])
      .separation((a, b) => (a.parent === b.parent ? 1 : 1.2))(root);
    const positions = new Map();
    root.each((node) => positions.set(node.data.id, node));
    return { root, positions };
  }

  function renderLinks(shape) {
    const paths = shape.root.links().map((link) => {
      const x1 = link.source.x;
      const y1 = link.source.y + NODE_H / 2;
      const x2 = link.target.x;
      const y2 = link.target.y - NODE_H / 2;
      const middle = (y1 + y2) / 2;
      return svg("path", { class: "link", d: `M${x1},${y1} C${x1},${middle} ${x2},${middle} ${x2},${y2}` });
    });
    links.replaceChildren(...paths);
  }

  function createNode(run) {
    const group = svg("g", { class: "node", tabindex: "0", role: "button", "data-run-id": run.id });
    const body = svg("g", { class: "node-body" });
    const left = -NODE_W / 2;
    const top = -NODE_H / 2;
    // The kind (with its tier) on a line of its own above the name, as the panel's kicker: on
    // the name's line it left a name of eleven letters no room ("metaclassesresearcher").
    // A node without a kind (the root) has its lines centred instead.
    const line = top + (run.kind ? 37 : 28); // the name's baseline
    body.append(
      svg("rect", { class: "node-card", x: left, y: top, width: NODE_W, height: NODE_H, rx: 12 }),
      svg("rect", { class: "node-stripe", x: left, y: top + 10, width: 5, height: NODE_H - 20, rx: 2.5 }),
      svg("text", { class: "node-kind", x: left + 18, y: line - 19 }),
      svg("text", { class: "node-name", x: left + 18, y: line }),
      svg("circle", { class: "node-dot", cx: left + 22, cy: line + 20, r: 5 }),
      svg("text", { class: "node-state", x: left + 33, y: line + 24 }),
      svg("text", { class: "node-figures", x: left + 18, y: line + 43 }),
      svg("title", {})
    );
    group.appendChild(body);
    group.addEventListener("click", () => onSelect(run.id));
    group.addEventListener("keydown", (event) => onKey(event, run.id));
    return group;
  }

  function renderNodes(shape) {
    const existing = new Map();
    nodes.querySelectorAll("g.node").forEach((node) => existing.set(Number(node.dataset.runId), node));
    // Nodes in layout order (depth, then left to right): the keyboard's Tab order too.
    let previous = null;
    shape.root.descendants().forEach((node) => {
      const run = node.data;
      const group = existing.get(run.id) || createNode(run);
      existing.delete(run.id);
      // DOM (and so Tab) order follows the layout. Only a node out of place is moved: moving
      // the focused node would take the keyboard focus away from it. In place before its text
      // is written: a node out of the document has no font to measure its text in.
      const expected = previous ? previous.nextSibling : nodes.firstChild;
      if (group !== expected) nodes.insertBefore(group, expected);
      previous = group;
      const selected = run.id === state.selected;
      group.setAttribute("class", `node ${lookOf(run)} status-${run.status}${selected ? " selected" : ""}`);
      group.setAttribute("transform", `translate(${node.x},${node.y})`);
      group.setAttribute("aria-pressed", selected ? "true" : "false");
      group.setAttribute("aria-label", runLabel(state, run));
      group.dataset.state = run.state;
      group.dataset.status = run.status;
      group.dataset.ending = run.ending || "";
      group.dataset.resumed = run.resumed ? "true" : "";
      // The name as it fits the card's width: whole in the title and the aria-label.
      const name = group.querySelector(".node-name");
      name.textContent = fitted(name, (run.resumed ? "↻ " : "") + agentName(run), TEXT_W);
      // Seed 002's delegation badge: the kind, and the tier its parent picked.
      group.dataset.kind = run.kind || "";
      group.dataset.tier = run.tier || "";
      const kind = group.querySelector(".node-kind");
      kind.textContent = fitted(kind, kindBadge(run), TEXT_W);
      const doing = group.querySelector(".node-state");
      doing.textContent = fitted(doing, doingText(run), NODE_W - 33 - PAD_RIGHT);
      const figures = group.querySelector(".node-figures");
      figures.textContent = fitted(figures, stepsText(run), TEXT_W, ` · ${usd(run.cost_usd)}`);
      group.querySelector("title").textContent = runLabel(state, run) + (run.error ? `. ${run.error}` : "");
    });
    existing.forEach((group) => group.remove());
  }

  function messagePairs() {
    const pairs = new Map();
    for (const message of state.messages.values()) {
      if (message.from_analyst) continue; // a note has no sender in the tree: no arrow
      const key = `${message.run}-${message.to}`;
      const pair = pairs.get(key) || { key, from: message.run, to: message.to, count: 0, last: message };
      pair.count += 1;
      pair.last = message;
      pairs.set(key, pair);
    }
    return pairs;
  }

  function arrowGeometry(a, b) {
    // Siblings share a row: rightward messages arc over the cards, leftward ones under them,
    // so a conversation both ways shows as two arrows.
    const rightward = a.x <= b.x;
    const side = rightward ? -1 : 1;
    const edge = side * (NODE_H / 2);
    const inset = (NODE_W / 4) * (rightward ? 1 : -1);
    const x1 = a.x + inset;
    const x2 = b.x - inset;
    const y1 = a.y + edge;
    const y2 = b.y + edge;
    const lift = side * (30 + Math.abs(x2 - x1) * 0.12);
    const cx = (x1 + x2) / 2;
    const cy = (y1 + y2) / 2 + lift;
    return { d: `M${x1},${y1} Q${cx},${cy} ${x2},${y2}`, mx: (x1 + 2 * cx + x2) / 4, my: (y1 + 2 * cy + y2) / 4 };
  }

  function renderArrows(shape) {
    const elements = [];
    for (const pair of messagePairs().values()) {
      const a = shape.positions.get(pair.from);
      const b = shape.positions.get(pair.to);
      if (!a || !b) continue;
      const geometry = arrowGeometry(a, b);
      const group = svg("g", {
        class: "message-arrow" + (freshArrows.has(pair.key) ? " fresh" : ""),
        "data-from": pair.from,
        "data-to": pair.to,
        "data-count": pair.count,
      });
      const title = svg("title", {});
      const word = pair.count === 1 ? "message" : "messages";
      title.textContent = `${agentName(a.data)} → ${agentName(b.data)}: ${pair.count} ${word}. Last: ${clip(pair.last.text, 140)}`;
      group.append(svg("path", { class: "message-path", d: geometry.d, "marker-end": "url(#arrowhead)" }), title);
      if (pair.count > 1) {
        group.append(svg("circle", { class: "message-count-bg", cx: geometry.mx, cy: geometry.my, r: 9 }));
        const label = svg("text", { class: "message-count", x: geometry.mx, y: geometry.my + 4 });
        label.textContent = String(pair.count);
        group.append(label);
      }
      elements.push(group);
    }
    arrows.replaceChildren(...elements);
    if (freshArrows.size) setTimeout(() => freshArrows.clear(), 1600);
  }

  function fit(shape) {
    let minX = Infinity;
    let maxX = -Infinity;
    let maxY = -Infinity;
    shape.root.each((node) => {
      minX = Math.min(minX, node.x - NODE_W / 2);
      maxX = Math.max(maxX, node.x + NODE_W / 2);
      maxY = Math.max(maxY, node.y + NODE_H / 2);
    });
    const pad = 24;
    // The root has no siblings, so no arc rises above it; arcs under the last row need room.
    const top = -NODE_H / 2 - pad;
    const width = maxX - minX + 2 * pad;
    const height = maxY - top + (state.messages.size ? 64 : pad);
    tree.setAttribute("viewBox", `${minX - pad} ${top} ${width} ${height}`);
    // Natural size at most; shrink to fit down to 75 % (text stays readable), then the card
    // scrolls sideways inside itself.
    tree.style.maxWidth = `${width}px`;
    tree.style.minWidth = `${Math.round(width * 0.75)}px`;
  }

  function nodeElement(runId) {
    return nodes.querySelector(`g.node[data-run-id="${runId}"]`);
  }

  function onKey(event, runId) {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      onSelect(runId);
      return;
    }
    const target = neighbour(runId, event.key);
    if (target !== null) {
      event.preventDefault();
      const element = nodeElement(target);
      if (element) element.focus();
    }
  }

  function nodeX(runId) {
    const element = nodeElement(runId);
    const match = element && /translate\(([-\d.]+)/.exec(element.getAttribute("transform"));
    return match ? Number(match[1]) : 0;
  }

  function neighbour(runId, key) {
    const run = state.runs.get(runId);
    if (!run) return null;
    if (key === "ArrowUp") return run.parent_id;
    const runs = state.list();
    if (key === "ArrowDown") {
      const first = runs.find((other) => other.parent_id === run.id);
      return first ? first.id : null;
    }
    if (key === "ArrowLeft" || key === "ArrowRight") {
      const row = runs.filter((other) => other.depth === run.depth).sort((a, b) => nodeX(a.id) - nodeX(b.id));
      const index = row.findIndex((other) => other.id === run.id);
      const next = row[index + (key === "ArrowRight" ? 1 : -1)];
      return next ? next.id : null;
    }
    return null;
  }

  return {
    freshArrow(key) {
      freshArrows.add(key);
    },
    render() {
      const shape = layout();
      if (!shape) return;
      renderLinks(shape);
      renderNodes(shape);
      renderArrows(shape);
      fit(shape);
    },
  };
}
