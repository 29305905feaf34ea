/* Canopy's live run page: the tree of agents, their messages and cost, kept in step with the
 * server over a websocket. Plain browser JavaScript and the vendored d3-hierarchy: no build step.
 *
 * The page starts from the snapshot embedded in it (the same one the socket sends) and then
 * asks the socket for the events after the last sequence number it applied. Events are applied
 * strictly in sequence order: one that arrives early waits for the missing ones, which are
 * fetched from the REST API if they do not come. A dropped socket reconnects with backoff and
 * asks again for what came after the last number, so nothing is lost.
 */
(function () {
  "use strict";

  const config = JSON.parse(document.getElementById("canopy-config").textContent);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const NODE_W = 176;
  const NODE_H = 80;
  const GAP_X = 22;
  const GAP_Y = 80;
  const ACTIVE = new Set(["queued", "working", "paused"]);
  const GAP_FILL_MS = 1500;
  const MAX_BACKOFF_MS = 10000;
  const CLOSE_REASONS = {
    4401: "Signed out: log in again to follow this research.",
    4404: "This research is not available.",
  };

  const page = {
    tree: document.getElementById("tree"),
    links: document.querySelector("#tree .layer-links"),
    arrows: document.querySelector("#tree .layer-messages"),
    nodes: document.querySelector("#tree .layer-nodes"),
    panel: document.getElementById("panel"),
    feed: document.getElementById("message-feed"),
    feedEmpty: document.getElementById("feed-empty"),
    connection: document.getElementById("connection"),
    announcer: document.getElementById("announcer"),
    status: document.getElementById("run-status"),
    cancelResearch: document.getElementById("cancel-research"),
    cost: document.getElementById("tree-cost"),
    tokens: document.getElementById("tree-tokens"),
    agents: document.getElementById("agent-count"),
    messageCount: document.getElementById("message-count"),
    planCard: document.getElementById("plan-card"),
    planVersion: document.getElementById("plan-version"),
    planItems: document.getElementById("plan-items"),
    planReview: document.getElementById("plan-review"),
    planEditor: document.getElementById("plan-editor"),
    planError: document.getElementById("plan-error"),
    planApprove: document.getElementById("plan-approve"),
    noteCard: document.getElementById("note-card"),
    noteForm: document.getElementById("note-form"),
    noteText: document.getElementById("note-text"),
    noteTarget: document.getElementById("note-target"),
    noteError: document.getElementById("note-error"),
    noteStatus: document.getElementById("note-status"),
  };

  // Exposed on window.canopy for tests and for anyone debugging a page: the socket, the last
  // sequence number applied, the runs and messages the page holds.
  const canopy = {
    root: config.root,
    runs: new Map(),
    messages: new Map(),
    lastSeq: 0,
    pending: new Map(),
    selected: config.selected,
    socket: null,
    reconnects: 0,
  };
  window.canopy = canopy;

  let attempts = 0;
  let stopped = false;
  let reconnectTimer = null;
  let gapTimer = null;
  let renderQueued = false;
  const freshArrows = new Set();

  // --- formatting ------------------------------------------------------------------------------

  function usd(value) {
    const amount = Number(value || 0);
    if (amount === 0) return "$0.00";
    if (amount >= 1) {
      return "$" + amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
    }
    return "$" + amount.toFixed(amount >= 0.01 ? 4 : 6);
  }

  function count(value) {
    return Number(value || 0).toLocaleString("en-US");
  }

  function agentName(run) {
    return run && run.name ? run.name : "root";
  }

  function clip(text, limit) {
    text = String(text || "");
    return text.length <= limit ? text : text.slice(0, limit - 1) + "…";
  }

  function svg(tag, attributes) {
    const element = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attributes || {})) element.setAttribute(name, value);
    return element;
  }

  // --- announcements (aria-live) ---------------------------------------------------------------

  function announce(text) {
    const line = document.createElement("p");
    line.textContent = text;
    page.announcer.appendChild(line);
    while (page.announcer.childNodes.length > 4) page.announcer.removeChild(page.announcer.firstChild);
  }

  // --- the model: snapshot and events --------------------------------------------------------

  function applySnapshot(snapshot) {
    canopy.runs.clear();
    for (const run of snapshot.runs) canopy.runs.set(run.id, Object.assign({ detail: "" }, run));
    canopy.messages.clear();
    for (const message of snapshot.messages) canopy.messages.set(message.id, message);
    canopy.lastSeq = snapshot.seq;
    for (const seq of Array.from(canopy.pending.keys())) {
      if (seq <= snapshot.seq) canopy.pending.delete(seq);
    }
    drain();
    scheduleRender();
    refreshPanelSoon();
  }

  function receive(event) {
    if (event.seq <= canopy.lastSeq || canopy.pending.has(event.seq)) return;
    canopy.pending.set(event.seq, event);
    drain();
  }

  function drain() {
    let applied = false;
    while (canopy.pending.has(canopy.lastSeq + 1)) {
      const event = canopy.pending.get(canopy.lastSeq + 1);
      canopy.pending.delete(event.seq);
      apply(event);
      canopy.lastSeq = event.seq;
      applied = true;
    }
    if (canopy.pending.size && !gapTimer) {
      gapTimer = setTimeout(fillGap, GAP_FILL_MS);
    } else if (!canopy.pending.size && gapTimer) {
      clearTimeout(gapTimer);
      gapTimer = null;
    }
    if (applied) scheduleRender();
  }

  // An event that never came (a push the server dropped): read it from the stored events.
  async function fillGap() {
    gapTimer = null;
    if (!canopy.pending.size) return;
    try {
      const response = await fetch(`${config.events}?after=${canopy.lastSeq}`, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.ok) {
        for (const event of await response.json()) receive(event.payload);
      }
    } catch (error) {
      // The socket's reconnection will catch up instead.
    }
    drain();
  }

  function update(runId, fields) {
    const run = canopy.runs.get(runId);
    if (run) Object.assign(run, fields);
    return run;
  }

  function apply(event) {
    const selected = canopy.selected;
    // A plan item's status follows its sub-agents, and the root's review state the plan.
    const treeChanged = event.type === "run.created" || event.type === "run.finished";
    const rootChanged = event.type === "run.state" && event.run === canopy.root;
    if (planShownVersion !== null && (treeChanged || rootChanged)) refreshPlanSoon();
    switch (event.type) {
      case "run.created": {
        const run = Object.assign({ detail: "" }, event.data);
        const known = canopy.runs.has(run.id);
        canopy.runs.set(run.id, Object.assign(canopy.runs.get(run.id) || {}, run));
        if (!known && run.parent_id !== null) {
          const parent = canopy.runs.get(run.parent_id);
          announce(`${agentName(parent)} started sub-agent ${agentName(run)}.`);
        }
        break;
      }
      case "run.state": {
        const fields = { status: event.status, state: event.state, detail: event.detail || "" };
        if (event.started_at) fields.started_at = event.started_at;
        const run = update(event.run, fields);
        if (run && event.run === selected) {
          announce(`${agentName(run)} is ${event.state}${event.detail ? ": " + event.detail : ""}.`);
        }
        break;
      }
      case "run.usage": {
        update(event.run, {
          steps: event.steps,
          input_tokens: event.input_tokens,
          output_tokens: event.output_tokens,
          cost_usd: event.cost_usd,
          tree_cost_usd: event.tree_cost_usd,
        });
        if (event.root_tree_cost_usd !== undefined) {
          update(canopy.root, { tree_cost_usd: event.root_tree_cost_usd });
        }
        break;
      }
      case "run.message": {
        const known = canopy.messages.has(event.id);
        canopy.messages.set(event.id, {
          id: event.id,
          run: event.run,
          to: event.to,
          from_name: event.from_name,
          to_name: event.to_name,
          text: event.text,
          sent_at: event.sent_at,
        });
        canopy.messages.get(event.id).from_analyst = Boolean(event.from_analyst);
        if (!known && event.from_analyst) {
          announce(`Your note reached ${event.to_name || "the root agent"}.`);
        } else if (!known) {
          freshArrows.add(`${event.run}-${event.to}`);
          announce(`${event.from_name} sent a message to ${event.to_name}.`);
        }
        break;
      }
      case "run.plan":
        refreshPlanSoon();
        break;
      case "run.report":
        update(event.run, { report: event.report });
        break;
      case "run.finished": {
        const run = update(event.run, {
          status: event.status,
          state: event.state,
          error: event.error || "",
          finished_at: event.finished_at,
          duration_seconds: event.duration_seconds,
          tool_calls: event.tool_calls,
          detail: "",
        });
        if (run) {
          const how = event.status === "done" ? "finished" : `failed: ${event.error}`;
          announce(`${agentName(run)} ${how}.`);
        }
        break;
      }
      default:
        break;
    }
    if (concernsPanel(event, selected)) refreshPanelSoon();
  }

  function concernsPanel(event, selected) {
    if (event.run === selected) return true;
    if (event.type !== "run.message") return false;
    return event.to === selected || selected === canopy.root;
  }

  // --- rendering -------------------------------------------------------------------------------

  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      render();
    });
  }

  function render() {
    renderTotals();
    const layout = layoutTree();
    if (layout) {
      renderLinks(layout);
      renderNodes(layout);
      renderArrows(layout);
      fitTree(layout);
    }
    renderFeed();
    renderNoteTarget();
  }

  function renderTotals() {
    const runs = Array.from(canopy.runs.values());
    const root = canopy.runs.get(canopy.root);
    const working = runs.filter((run) => ACTIVE.has(run.status)).length;
    const input = runs.reduce((sum, run) => sum + Number(run.input_tokens || 0), 0);
    const output = runs.reduce((sum, run) => sum + Number(run.output_tokens || 0), 0);
    page.cost.textContent = usd(root ? root.tree_cost_usd : 0);
    page.tokens.textContent = `${count(input)} in · ${count(output)} out`;
    page.agents.textContent = working ? `${runs.length} · ${working} working` : String(runs.length);
    page.messageCount.textContent = String(canopy.messages.size);
    if (root) {
      page.status.textContent = root.status;
      page.status.className = `badge status-${root.status}`;
      if (!ACTIVE.has(root.status)) page.cancelResearch.hidden = true;
    }
  }

  function layoutTree() {
    // Keep only runs whose parents the page holds (always all of them, in sequence order).
    const runs = Array.from(canopy.runs.values()).sort((a, b) => a.depth - b.depth || a.id - b.id);
    const known = new Set();
    const rows = [];
    for (const run of runs) {
      if (run.parent_id === null ? run.id === canopy.root : known.has(run.parent_id)) {
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

  function renderLinks(layout) {
    const paths = [];
    layout.root.links().forEach((link) => {
      const x1 = link.source.x;
      const y1 = link.source.y + NODE_H / 2;
      const x2 = link.target.x;
      const y2 = link.target.y - NODE_H / 2;
      const middle = (y1 + y2) / 2;
      const path = svg("path", {
        class: "link",
        d: `M${x1},${y1} C${x1},${middle} ${x2},${middle} ${x2},${y2}`,
      });
      paths.push(path);
    });
    page.links.replaceChildren(...paths);
  }

  function kindBadge(run) {
    if (!run.kind) return "";
    return run.tier ? `${clip(run.kind, 10)} · ${clip(run.tier, 6)}` : clip(run.kind, 12);
  }

  function nodeLabel(run) {
    const doing = ACTIVE.has(run.status)
      ? `${run.state}${run.detail ? ` (${run.detail})` : ""}, ${run.status}`
      : run.status;
    const kind = run.kind ? `, ${run.kind}${run.tier ? ` on tier ${run.tier}` : ""}` : "";
    let seconds = run.duration_seconds;
    if (seconds == null && run.started_at && run.finished_at) {
      seconds = (Date.parse(run.finished_at) - Date.parse(run.started_at)) / 1000;
    }
    const calls = run.tool_calls != null ? ` with ${run.tool_calls} tool calls` : "";
    const ended = seconds != null && !ACTIVE.has(run.status) ? `, worked ${Math.round(seconds)} s${calls}` : "";
    return (
      `${agentName(run)}${kind} (${run.model}): ${doing}, ${run.steps} of ${run.max_steps} steps, ` +
      `${usd(run.cost_usd)}${ended}` +
      (run.id === canopy.selected ? ", selected" : "")
    );
  }

  function createNode(run) {
    const group = svg("g", { class: "node", tabindex: "0", role: "button", "data-run-id": run.id });
    const body = svg("g", { class: "node-body" });
    const left = -NODE_W / 2;
    const top = -NODE_H / 2;
    body.append(
      svg("rect", { class: "node-card", x: left, y: top, width: NODE_W, height: NODE_H, rx: 12 }),
      svg("rect", { class: "node-stripe", x: left, y: top + 10, width: 5, height: NODE_H - 20, rx: 2.5 }),
      svg("text", { class: "node-name", x: left + 18, y: top + 24 }),
      svg("text", { class: "node-kind", x: left + NODE_W - 12, y: top + 23, "text-anchor": "end" }),
      svg("circle", { class: "node-dot", cx: left + 22, cy: top + 45, r: 5 }),
      svg("text", { class: "node-state", x: left + 33, y: top + 49 }),
      svg("text", { class: "node-figures", x: left + 18, y: top + 68 }),
      svg("title", {})
    );
    group.appendChild(body);
    group.addEventListener("click", () => select(run.id));
    group.addEventListener("keydown", (event) => onNodeKey(event, run.id));
    return group;
  }

  function renderNodes(layout) {
    const existing = new Map();
    page.nodes.querySelectorAll("g.node").forEach((node) => existing.set(Number(node.dataset.runId), node));
    // Nodes in layout order (depth, then left to right): the keyboard's Tab order too.
    const ordered = layout.root.descendants();
    let previous = null;
    ordered.forEach((node) => {
      const run = node.data;
      let group = existing.get(run.id);
      if (!group) group = createNode(run);
      existing.delete(run.id);
      const selected = run.id === canopy.selected;
      group.setAttribute("class", `node state-${run.state} status-${run.status}${selected ? " selected" : ""}`);
      group.setAttribute("transform", `translate(${node.x},${node.y})`);
      group.setAttribute("aria-pressed", selected ? "true" : "false");
      group.setAttribute("aria-label", nodeLabel(run));
      group.dataset.state = run.state;
      group.dataset.status = run.status;
      group.querySelector(".node-name").textContent = clip(agentName(run), run.kind ? 11 : 19);
      // Seed 002's delegation badge: the kind, and the tier its parent picked.
      group.dataset.kind = run.kind || "";
      group.dataset.tier = run.tier || "";
      group.querySelector(".node-kind").textContent = kindBadge(run);
      // An ended agent shows how it ended; a working one what it does, and on what.
      let state = ACTIVE.has(run.status) ? run.state : run.status;
      if (run.detail && ACTIVE.has(run.status)) state = `${run.state} · ${run.detail}`;
      group.querySelector(".node-state").textContent = clip(state, 20);
      group.querySelector(".node-figures").textContent =
        `${run.steps}/${run.max_steps} steps · ${usd(run.cost_usd)}`;
      group.querySelector("title").textContent = nodeLabel(run) + (run.error ? `. ${run.error}` : "");
      // DOM (and so Tab) order follows the layout. Only a node out of place is moved: moving
      // the focused node would take the keyboard focus away from it.
      const expected = previous ? previous.nextSibling : page.nodes.firstChild;
      if (group !== expected) page.nodes.insertBefore(group, expected);
      previous = group;
    });
    existing.forEach((group) => group.remove());
  }

  function messagePairs() {
    const pairs = new Map();
    for (const message of canopy.messages.values()) {
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

  function renderArrows(layout) {
    const elements = [];
    for (const pair of messagePairs().values()) {
      const a = layout.positions.get(pair.from);
      const b = layout.positions.get(pair.to);
      if (!a || !b) continue;
      const geometry = arrowGeometry(a, b);
      const group = svg("g", {
        class: "message-arrow" + (freshArrows.has(pair.key) ? " fresh" : ""),
        "data-from": pair.from,
        "data-to": pair.to,
        "data-count": pair.count,
      });
      const title = svg("title", {});
      const plural = pair.count === 1 ? "message" : "messages";
      title.textContent = `${agentName(a.data)} → ${agentName(b.data)}: ${pair.count} ${plural}. Last: ${clip(pair.last.text, 140)}`;
      group.append(svg("path", { class: "message-path", d: geometry.d, "marker-end": "url(#arrowhead)" }), title);
      if (pair.count > 1) {
        group.append(svg("circle", { class: "message-count-bg", cx: geometry.mx, cy: geometry.my, r: 9 }));
        const label = svg("text", { class: "message-count", x: geometry.mx, y: geometry.my + 4 });
        label.textContent = String(pair.count);
        group.append(label);
      }
      elements.push(group);
    }
    page.arrows.replaceChildren(...elements);
    if (freshArrows.size) setTimeout(() => freshArrows.clear(), 1600);
  }

  function fitTree(layout) {
    let minX = Infinity;
    let maxX = -Infinity;
    let maxY = -Infinity;
    layout.root.each((node) => {
      minX = Math.min(minX, node.x - NODE_W / 2);
      maxX = Math.max(maxX, node.x + NODE_W / 2);
      maxY = Math.max(maxY, node.y + NODE_H / 2);
    });
    const pad = 24;
    // The root has no siblings, so no arc rises above it; arcs under the last row need room.
    const top = -NODE_H / 2 - pad;
    const width = maxX - minX + 2 * pad;
    const height = maxY - top + (canopy.messages.size ? 64 : pad);
    page.tree.setAttribute("viewBox", `${minX - pad} ${top} ${width} ${height}`);
    // Natural size at most; shrink to fit down to 60 %, then the card scrolls sideways.
    page.tree.style.maxWidth = `${width}px`;
    page.tree.style.minWidth = `${Math.round(width * 0.6)}px`;
  }

  function renderFeed() {
    const shown = new Set();
    page.feed.querySelectorAll("li[data-message-id]").forEach((item) => shown.add(Number(item.dataset.messageId)));
    const messages = Array.from(canopy.messages.values()).sort((a, b) => a.id - b.id);
    for (const message of messages) {
      if (shown.has(message.id)) continue;
      const item = document.createElement("li");
      item.className = "feed-item";
      item.dataset.messageId = message.id;
      const meta = document.createElement("p");
      meta.className = "feed-meta";
      if (message.from_analyst) item.classList.add("note");
      const from = document.createElement("strong");
      from.textContent = message.from_analyst ? "the analyst" : message.from_name;
      const to = document.createElement("strong");
      to.textContent = message.to_name || "root";
      const time = document.createElement("time");
      time.className = "muted";
      time.dateTime = message.sent_at;
      time.textContent = new Date(message.sent_at).toLocaleTimeString();
      meta.append(from, " → ", to, " ", time);
      const text = document.createElement("p");
      text.className = "feed-text prewrap";
      text.textContent = message.text; // text, never markup: a message may hold anything
      item.append(meta, text);
      page.feed.appendChild(item);
    }
    page.feedEmpty.hidden = messages.length > 0;
  }

  // --- selection and keyboard -------------------------------------------------------------------

  function select(runId) {
    if (!canopy.runs.has(runId)) return;
    const changed = canopy.selected !== runId;
    canopy.selected = runId;
    if (changed) {
      const url = new URL(window.location.href);
      if (runId === canopy.root) url.searchParams.delete("agent");
      else url.searchParams.set("agent", runId);
      history.replaceState(null, "", url);
      announce(`Showing ${agentName(canopy.runs.get(runId))}.`);
      page.panel.setAttribute("aria-busy", "true");
    }
    scheduleRender();
    loadPanel();
  }

  function nodeElement(runId) {
    return page.nodes.querySelector(`g.node[data-run-id="${runId}"]`);
  }

  function onNodeKey(event, runId) {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      select(runId);
      return;
    }
    const target = neighbour(runId, event.key);
    if (target !== null) {
      event.preventDefault();
      const element = nodeElement(target);
      if (element) element.focus();
    }
  }

  function neighbour(runId, key) {
    const run = canopy.runs.get(runId);
    if (!run) return null;
    if (key === "ArrowUp") return run.parent_id;
    const children = (parentId) =>
      Array.from(canopy.runs.values())
        .filter((other) => other.parent_id === parentId)
        .sort((a, b) => a.id - b.id);
    if (key === "ArrowDown") {
      const first = children(run.id)[0];
      return first ? first.id : null;
    }
    if (key === "ArrowLeft" || key === "ArrowRight") {
      const row = Array.from(canopy.runs.values())
        .filter((other) => other.depth === run.depth)
        .sort((a, b) => nodeX(a.id) - nodeX(b.id));
      const index = row.findIndex((other) => other.id === run.id);
      const next = row[index + (key === "ArrowRight" ? 1 : -1)];
      return next ? next.id : null;
    }
    return null;
  }

  function nodeX(runId) {
    const element = nodeElement(runId);
    const match = element && /translate\(([-\d.]+)/.exec(element.getAttribute("transform"));
    return match ? Number(match[1]) : 0;
  }

  // --- the agent panel (HTML rendered and sanitised by the server) -------------------------------

  let panelTimer = null;
  let panelLoading = false;
  let panelAgain = false;
  let panelShows = null;

  function refreshPanelSoon() {
    if (panelTimer) return; // throttled: one refresh per burst of events
    panelTimer = setTimeout(() => {
      panelTimer = null;
      loadPanel();
    }, 300);
  }

  function panelUrl(runId) {
    return config.panel.replace(/\/0\/$/, `/${runId}/`);
  }

  async function loadPanel() {
    if (panelLoading) {
      panelAgain = true;
      return;
    }
    panelLoading = true;
    const runId = canopy.selected;
    try {
      const response = await fetch(panelUrl(runId), { credentials: "same-origin" });
      if (runId === canopy.selected) {
        if (response.ok) showPanel(runId, await response.text());
        else showPanelError(`Could not load this agent (HTTP ${response.status}).`);
      } else {
        panelAgain = true;
      }
    } catch (error) {
      showPanelError("Could not load this agent: the server did not answer. Retrying when the connection is back.");
    } finally {
      panelLoading = false;
      if (panelAgain) {
        panelAgain = false;
        loadPanel();
      }
    }
  }

  function showPanel(runId, html) {
    const sameAgent = panelShows === runId;
    const open = new Map();
    let focusKey = null;
    if (sameAgent) {
      page.panel.querySelectorAll("details[data-key]").forEach((details) => open.set(details.dataset.key, details.open));
      const focused = document.activeElement;
      if (focused && page.panel.contains(focused)) {
        const holder = focused.closest("[data-key]");
        focusKey = holder ? holder.dataset.key : focused.id || null;
      }
    }
    const scroll = page.panel.scrollTop;
    page.panel.innerHTML = html; // the server escaped every text and sanitised the report
    panelShows = runId;
    page.panel.removeAttribute("aria-busy");
    page.panel.querySelectorAll("details[data-key]").forEach((details) => {
      if (open.has(details.dataset.key)) details.open = open.get(details.dataset.key);
    });
    if (sameAgent) {
      page.panel.scrollTop = scroll;
      if (focusKey) {
        const again =
          page.panel.querySelector(`[data-key="${CSS.escape(focusKey)}"] > summary`) ||
          document.getElementById(focusKey);
        if (again) again.focus();
      }
    }
  }

  function showPanelError(text) {
    page.panel.removeAttribute("aria-busy");
    const alert = document.createElement("p");
    alert.className = "alert alert-error";
    alert.setAttribute("role", "alert");
    alert.textContent = text;
    page.panel.prepend(alert);
  }

  // --- the plan and its review -------------------------------------------------------------------

  let planTimer = null;
  let planShownVersion = null; // the version on the page; null: no plan yet
  let planEdited = null; // the version whose items are in the review editor
  let planAsked = 0; // a later answer wins: one still in flight is dropped when it lands
  const PLAN_MARKS = { open: "○", working: "◐", covered: "✓", failed: "✗", gap: "!" };

  function refreshPlanSoon() {
    if (planTimer) return;
    planTimer = setTimeout(() => {
      planTimer = null;
      loadPlan();
    }, 300);
  }

  async function loadPlan() {
    const asked = ++planAsked;
    try {
      const response = await fetch(config.plan, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.ok) {
        const plan = await response.json();
        if (asked === planAsked) renderPlan(plan);
      }
    } catch (error) {
      // The next event tries again.
    }
  }

  function renderPlan(plan) {
    page.planCard.hidden = plan.version === null;
    planShownVersion = plan.version;
    if (plan.version === null) return;
    page.planVersion.textContent = `version ${plan.version}${plan.approved ? " · approved" : ""}`;
    const items = plan.items.map((item) => {
      const li = document.createElement("li");
      li.className = "plan-item";
      li.dataset.status = item.status;
      const mark = document.createElement("span");
      mark.className = "plan-mark";
      mark.setAttribute("aria-hidden", "true");
      mark.textContent = PLAN_MARKS[item.status] || "•";
      const text = document.createElement("span");
      text.className = "plan-text";
      text.textContent = `${item.number}. ${item.text}`;
      const status = document.createElement("span");
      status.className = "badge plan-status";
      status.textContent = item.status;
      li.append(mark, text, " ", status);
      if (item.agents.length) {
        const agents = document.createElement("span");
        agents.className = "plan-agents muted";
        agents.textContent = ` by ${item.agents.map((agent) => agent.name).join(", ")}`;
        li.append(agents);
      }
      return li;
    });
    page.planItems.replaceChildren(...items);
    page.planReview.hidden = !plan.awaiting_review;
    // The editor is filled once per version, so an analyst's edits survive refreshes.
    if (plan.awaiting_review && planEdited !== plan.version) {
      page.planEditor.value = plan.items.map((item) => item.text).join("\n");
      planEdited = plan.version;
    }
  }

  function firstError(body) {
    if (!body || typeof body !== "object") return "";
    if (body.detail) return body.detail;
    const first = Object.values(body)[0];
    return Array.isArray(first) ? first[0] : String(first || "");
  }

  async function postJson(url, data) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json", "Content-Type": "application/json" },
      body: JSON.stringify(data),
    });
    let body = null;
    try {
      body = await response.json();
    } catch (error) {
      body = null;
    }
    if (!response.ok) throw new Error(firstError(body) || `HTTP ${response.status}`);
    return body;
  }

  page.planApprove.addEventListener("click", async () => {
    const items = page.planEditor.value.split("\n").map((line) => line.trim()).filter(Boolean);
    page.planApprove.disabled = true;
    page.planError.hidden = true;
    try {
      planAsked += 1; // a refresh asked before the approval must not show the review again
      renderPlan(await postJson(config.approve, { items }));
      announce("Plan approved: the research resumes.");
    } catch (error) {
      page.planError.textContent = error.message;
      page.planError.hidden = false;
    } finally {
      page.planApprove.disabled = false;
    }
  });

  // --- notes to an agent ------------------------------------------------------------------------

  function renderNoteTarget() {
    const run = canopy.runs.get(canopy.selected);
    page.noteTarget.textContent = !run || run.id === canopy.root ? "the root agent" : agentName(run);
    const root = canopy.runs.get(canopy.root);
    page.noteCard.hidden = !root || !ACTIVE.has(root.status);
  }

  page.noteForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = page.noteText.value;
    const runId = canopy.selected || canopy.root;
    page.noteError.hidden = true;
    page.noteStatus.textContent = "Sending…";
    try {
      await postJson(config.notes.replace(/\/0\/notes$/, `/${runId}/notes`), { text });
      page.noteText.value = "";
      page.noteStatus.textContent = `Sent to ${page.noteTarget.textContent}.`;
    } catch (error) {
      page.noteStatus.textContent = "";
      page.noteError.textContent = error.message;
      page.noteError.hidden = false;
    }
  });

  // --- cancelling ----------------------------------------------------------------------------------

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (input) return input.value;
    const match = /(?:^|;\s*)csrftoken=([^;]+)/.exec(document.cookie);
    return match ? decodeURIComponent(match[1]) : "";
  }

  async function cancelRun(runId, button, label) {
    button.disabled = true;
    button.textContent = "Cancelling…";
    announce(`Cancelling ${label}.`);
    try {
      const response = await fetch(config.cancel.replace(/\/0\/cancel$/, `/${runId}/cancel`), {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
    } catch (error) {
      button.disabled = false;
      button.textContent = "Try cancelling again";
      announce(`Could not cancel ${label} (${error.message}).`);
    }
  }

  page.cancelResearch.addEventListener("click", () => {
    cancelRun(canopy.root, page.cancelResearch, "the research");
  });

  page.panel.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-cancel-run]");
    if (button) cancelRun(Number(button.dataset.cancelRun), button, button.dataset.name || "the sub-agent");
  });

  // --- the socket ----------------------------------------------------------------------------------

  function setConnection(state, text) {
    page.connection.dataset.state = state;
    page.connection.textContent = text;
  }

  function connect() {
    reconnectTimer = null;
    if (stopped) return;
    if (!navigator.onLine) {
      setConnection("offline", "Offline: reconnects when the network is back");
      return; // the "online" event reconnects
    }
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${window.location.host}${config.socket}?after=${canopy.lastSeq}`);
    canopy.socket = socket;
    socket.addEventListener("open", () => {
      attempts = 0;
      setConnection("live", "Live");
    });
    socket.addEventListener("message", (message) => {
      const data = JSON.parse(message.data);
      if (data.type === "snapshot") applySnapshot(data);
      else if (typeof data.seq === "number") receive(data);
    });
    socket.addEventListener("close", (event) => {
      if (canopy.socket === socket) canopy.socket = null;
      if (CLOSE_REASONS[event.code]) {
        stopped = true;
        setConnection("closed", CLOSE_REASONS[event.code]);
        return;
      }
      scheduleReconnect();
    });
  }

  function scheduleReconnect() {
    if (stopped || reconnectTimer) return;
    const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** attempts) * (0.75 + Math.random() * 0.5);
    attempts += 1;
    canopy.reconnects += 1;
    setConnection("reconnecting", "Reconnecting…");
    reconnectTimer = setTimeout(connect, delay);
  }

  window.addEventListener("online", () => {
    if (stopped || canopy.socket) return;
    clearTimeout(reconnectTimer);
    attempts = 0;
    connect();
  });
  window.addEventListener("offline", () => setConnection("offline", "Offline: reconnects when the network is back"));
  window.addEventListener("pagehide", () => {
    stopped = true;
    if (canopy.socket) canopy.socket.close();
  });
  window.addEventListener("pageshow", (event) => {
    if (!event.persisted) return; // restored from the back-forward cache: follow again
    stopped = false;
    attempts = 0;
    connect();
  });

  // --- start -------------------------------------------------------------------------------------

  applySnapshot(config.snapshot);
  loadPlan();
  render();
  loadPanel();
  connect();
})();
