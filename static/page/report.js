// The report on stage: when the research ends, the report takes the page (a Report tab ahead
// of the agents, selected on the end), at reading width, with its table of contents.
import { localiseTimes } from "./feed.js";

export function createReportStage(state, page, config) {
  let loadedFor = null;
  const tabs = [page.tabReport, page.tabAgents];

  function choose(tab, { focus = false } = {}) {
    for (const other of tabs) {
      const selected = other === tab;
      other.setAttribute("aria-selected", selected ? "true" : "false");
      other.tabIndex = selected ? 0 : -1;
      document.getElementById(other.getAttribute("aria-controls")).hidden = !selected;
    }
    if (focus) tab.focus();
    page.run.dataset.view = tab === page.tabReport ? "report" : "agents";
  }

  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => choose(tab));
    tab.addEventListener("keydown", (event) => {
      if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
      event.preventDefault();
      choose(tabs[(index + 1) % tabs.length], { focus: true });
    });
  });

  // The root's panel points at the Report tab.
  page.panel.addEventListener("click", (event) => {
    if (!event.target.closest("[data-show-report]")) return;
    event.preventDefault();
    choose(page.tabReport, { focus: true });
  });

  async function load(root) {
    loadedFor = root.report;
    try {
      const response = await fetch(config.report, { credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      page.reportStage.innerHTML = await response.text(); // escaped and sanitised by the server
      localiseTimes(page.reportStage);
      page.tabs.hidden = false;
      choose(page.tabReport);
    } catch (error) {
      loadedFor = null; // the next change tries again
    }
  }

  // The page opened on an ended research: the server drew the report already.
  if (page.reportStage.childElementCount) {
    loadedFor = (state.rootRun() || {}).report;
    page.tabs.hidden = false;
    choose(page.tabReport);
  } else {
    choose(page.tabAgents);
  }

  return {
    render() {
      const root = state.rootRun();
      if (root && !root.active && root.report && loadedFor !== root.report) load(root);
    },
  };
}
