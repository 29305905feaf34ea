// The selected agent's panel: HTML the server renders and sanitises, loaded again (throttled)
// when an event concerns it. Switching agents starts the panel at its top; on a narrow screen
// the panel is brought into view, since it sits under the agents there.
import { localiseTimes } from "./feed.js";
import { count, endingWord, stepsText, usd, waitingWord } from "./format.js";
import { drawClocks } from "./tiles.js";

const NARROW = window.matchMedia("(max-width: 1080px)");

export function createPanel(state, panel, config) {
  let timer = null;
  let loading = false;
  let again = false;
  let shows = null;
  let reveal = false;

  function url(runId) {
    return config.panel.replace(/\/0\/$/, `/${runId}/`);
  }

  async function load() {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    const runId = state.selected;
    try {
      const response = await fetch(url(runId), { credentials: "same-origin" });
      if (runId !== state.selected) again = true;
      else if (response.ok) show(runId, await response.text());
      else showError(`Could not load this agent: the server answered HTTP ${response.status}.`);
    } catch (error) {
      showError("Could not load this agent: the server did not answer. It tries again when the connection is back.");
    } finally {
      loading = false;
      if (again) {
        again = false;
        load();
      }
    }
  }

  function show(runId, html) {
    const sameAgent = shows === runId;
    const open = new Map();
    let focusKey = null;
    if (sameAgent) {
      panel.querySelectorAll("details[data-key]").forEach((details) => open.set(details.dataset.key, details.open));
      const focused = document.activeElement;
      if (focused && panel.contains(focused)) {
        const holder = focused.closest("[data-key]");
        focusKey = holder ? holder.dataset.key : focused.id || null;
      }
    }
    const scroll = panel.scrollTop;
    panel.innerHTML = html; // the server escaped every text and sanitised the report
    localiseTimes(panel);
    shows = runId;
    // Its live status is drawn with the tree, in the next frame: drawn now, from a state the
    // tree has not drawn yet, it could say "working" beside a node that still says "queued".
    state.redraw();
    panel.removeAttribute("aria-busy");
    panel.querySelectorAll("details[data-key]").forEach((details) => {
      if (open.has(details.dataset.key)) details.open = open.get(details.dataset.key);
    });
    if (sameAgent) {
      panel.scrollTop = scroll;
      if (focusKey) {
        const back =
          panel.querySelector(`[data-key="${CSS.escape(focusKey)}"] > summary`) || document.getElementById(focusKey);
        if (back) back.focus();
      }
      return;
    }
    panel.scrollTop = 0;
    if (reveal && NARROW.matches) panel.scrollIntoView({ block: "start" });
    reveal = false;
  }

  function badge(className, text) {
    const span = document.createElement("span");
    span.className = `badge ${className}`;
    span.textContent = text;
    return span;
  }

  // An agent's cost with its sub-agents': the root's as the header has it; another's summed
  // over the runs the page holds, since a run.usage carries the tree cost of its own agent
  // and of the root, not of the agents between them.
  function treeCost(run) {
    if (run.id === state.root) return Number(run.tree_cost_usd || 0);
    let total = 0;
    for (const other of state.runs.values()) {
      for (let up = other; up; up = state.runs.get(up.parent_id)) {
        if (up.id === run.id) {
          total += Number(other.cost_usd || 0);
          break;
        }
      }
    }
    return total;
  }

  function renderCost(cost, run) {
    const own = usd(run.cost_usd);
    const tree = usd(treeCost(run));
    if (tree === own) {
      cost.textContent = own;
      return;
    }
    const withSubagents = document.createElement("span");
    withSubagents.className = "muted";
    withSubagents.textContent = `(${tree} with its sub-agents)`;
    cost.replaceChildren(`${own} `, withSubagents);
  }

  // The panel's status and figures follow the state at every render, as the header's tiles
  // and the tree's nodes do, so none of them says another figure for the same agent (a root
  // waiting on its sub-agents is loaded again only when it moves). The rest of it (timeline,
  // transcript, report) is the server's, loaded again after a burst.
  function renderLive() {
    const run = state.runs.get(shows);
    const badges = panel.querySelector('[data-live="badges"]');
    if (!run || !badges || Number(badges.dataset.runId) !== run.id) return;
    let shown;
    if (!run.active) shown = [badge(`ending-${run.ending}`, endingWord(run))];
    else if (run.status === "paused") shown = [badge("status-paused", waitingWord(run))];
    else shown = [badge(`state-${run.state}`, run.state), " ", badge(`status-${run.status}`, run.status)];
    badges.replaceChildren(...shown);
    badges.dataset.status = run.status;
    badges.dataset.ending = run.active ? "" : run.ending;
    const steps = panel.querySelector('[data-live="steps"]');
    if (steps) steps.textContent = stepsText(run);
    const cost = panel.querySelector('[data-live="cost"]');
    if (cost) renderCost(cost, run);
    const tokens = panel.querySelector('[data-live="tokens"]');
    if (tokens) tokens.textContent = `${count(run.input_tokens)} in · ${count(run.output_tokens)} out`;
    drawClocks(state, panel);
  }

  function showError(text) {
    panel.removeAttribute("aria-busy");
    const alert = document.createElement("p");
    alert.className = "alert alert-error";
    alert.setAttribute("role", "alert");
    alert.textContent = text;
    panel.prepend(alert);
  }

  return {
    load,
    render: renderLive,
    /** The analyst chose another agent: show it from its top, in view. */
    switchTo() {
      panel.setAttribute("aria-busy", "true");
      panel.scrollTop = 0;
      reveal = true;
      load();
    },
    soon() {
      if (timer) return; // throttled: one refresh per burst of events
      timer = setTimeout(() => {
        timer = null;
        load();
      }, 300);
    },
  };
}
