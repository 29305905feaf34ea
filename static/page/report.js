// The report on stage: when the research ends, the report takes the page ahead of the agents,
// at reading width, with its table of contents; the agents stay below it.
import { localiseTimes } from "./feed.js";

export function createReportStage(state, page, config) {
  // The page opened on an ended research: the server drew the report already. The state has
  // no runs yet when the stage is made (the snapshot comes after), so the report it drew is
  // taken at the first render: fetching it again would replace the stage, and with it a
  // follow-up question being typed or its error.
  let serverDrew = page.reportStage.childElementCount > 0;
  let loadedFor = null;

  // The tabs are links within the page: the one the analyst followed becomes the current
  // one, or "Report" would stay current over the agents.
  function markTab(hash) {
    const tabs = Array.from(page.tabs.querySelectorAll(".run-tab"));
    if (!tabs.some((tab) => tab.getAttribute("href") === hash)) return;
    tabs.forEach((tab) => {
      if (tab.getAttribute("href") === hash) tab.setAttribute("aria-current", "true");
      else tab.removeAttribute("aria-current");
    });
  }
  page.tabs.addEventListener("click", (event) => {
    const tab = event.target.closest(".run-tab");
    if (tab) markTab(tab.getAttribute("href"));
  });
  window.addEventListener("hashchange", () => markTab(window.location.hash));
  markTab(window.location.hash);

  async function load(root) {
    loadedFor = root.report;
    try {
      const response = await fetch(config.report, { credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      page.reportStage.innerHTML = await response.text(); // escaped and sanitised by the server
      localiseTimes(page.reportStage);
      page.reportStage.hidden = false;
      page.tabs.hidden = false;
      page.reportStage.scrollIntoView({ block: "start" });
      markTab("#report-stage");
    } catch (error) {
      loadedFor = null; // the next change tries again
    }
  }

  return {
    render() {
      const root = state.rootRun();
      if (root && serverDrew) {
        serverDrew = false;
        if (!root.active) loadedFor = root.report;
      }
      if (root && !root.active && root.report && loadedFor !== root.report) load(root);
    },
  };
}
