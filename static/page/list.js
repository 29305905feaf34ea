// The agents as a list: the tree's alternative on a narrow screen, where an SVG shrunk to fit
// would make its text too small to read. One row per agent, indented by generation.
import { agentName, lookOf, stepsText, usd } from "./format.js";
import { doingText, kindBadge } from "./tree.js";

export function createAgentList(state, list, onSelect) {
  function row(run) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "agent-row";
    button.dataset.runId = run.id;
    button.addEventListener("click", () => onSelect(run.id));
    const name = document.createElement("span");
    name.className = "agent-row-name";
    const kind = document.createElement("span");
    kind.className = "agent-row-kind muted";
    const doing = document.createElement("span");
    doing.className = "agent-row-doing";
    const figures = document.createElement("span");
    figures.className = "agent-row-figures muted";
    button.append(name, kind, doing, figures);
    item.append(button);
    return item;
  }

  return {
    render() {
      const rows = new Map();
      list.querySelectorAll("button[data-run-id]").forEach((button) => rows.set(Number(button.dataset.runId), button.parentElement));
      const ordered = [];
      // Depth first, children under their parent, as the tree reads top to bottom.
      const children = new Map();
      for (const run of state.list()) {
        const key = run.parent_id === null ? "root" : run.parent_id;
        if (!children.has(key)) children.set(key, []);
        children.get(key).push(run);
      }
      const walk = (run) => {
        ordered.push(run);
        (children.get(run.id) || []).forEach(walk);
      };
      (children.get("root") || []).forEach(walk);
      const items = ordered.map((run) => {
        const item = rows.get(run.id) || row(run);
        const button = item.firstChild;
        button.className = `agent-row ${lookOf(run)}`;
        button.style.setProperty("--depth", String(run.depth));
        button.dataset.status = run.status;
        button.dataset.ending = run.ending || "";
        button.setAttribute("aria-pressed", run.id === state.selected ? "true" : "false");
        button.dataset.resumed = run.resumed ? "true" : "";
        button.querySelector(".agent-row-name").textContent = (run.resumed ? "↻ " : "") + agentName(run);
        button.querySelector(".agent-row-kind").textContent = kindBadge(run);
        button.querySelector(".agent-row-doing").textContent = doingText(run);
        button.querySelector(".agent-row-figures").textContent = `${stepsText(run)} · ${usd(run.cost_usd)}`;
        return item;
      });
      list.replaceChildren(...items);
    },
  };
}
