// Canopy's live run page: the tree of agents, their messages and cost, kept in step with the
// server over a websocket. Plain ES modules and the vendored d3-hierarchy: no build step.
//
// The page starts from the snapshot embedded in it (the same one the socket sends), then asks
// the socket for the events after the last sequence number it applied. Every part of the page
// renders from the one state (state.js), once per animation frame.
import { createActions } from "./page/actions.js";
import { createClarify } from "./page/clarify.js";
import { createFeed } from "./page/feed.js";
import { agentName, endingWord } from "./page/format.js";
import { createAgentList } from "./page/list.js";
import { createPanel } from "./page/panel.js";
import { createPlan } from "./page/plan.js";
import { createReportStage } from "./page/report.js";
import { follow } from "./page/socket.js";
import { createState, movesOn } from "./page/state.js";
import { createTiles } from "./page/tiles.js";
import { createTree } from "./page/tree.js";

const config = JSON.parse(document.getElementById("canopy-config").textContent);
// A refused follow-up is answered at its form's address (…/follow-up): the address bar shows
// the page's own, so a reload or a copied link opens this page, not an action.
if (location.pathname !== config.page) {
  history.replaceState(history.state, "", config.page + location.search + location.hash);
}
const byId = (id) => document.getElementById(id);
const page = {
  run: byId("run-page"),
  panel: byId("panel"),
  announcer: byId("announcer"),
  connection: byId("connection"),
  status: byId("run-status"),
  cancel: byId("cancel-research"),
  resume: byId("resume-research"),
  notify: byId("notify-me"),
  exports: document.querySelectorAll("[data-needs-report]"),
  cost: byId("tree-cost"),
  tokens: byId("tree-tokens"),
  agents: byId("agent-count"),
  done: byId("agents-done"),
  elapsed: byId("elapsed"),
  messageCount: byId("message-count"),
  tabs: byId("run-tabs"),
  reportStage: byId("report-stage"),
  planCard: byId("plan-card"),
  planVersion: byId("plan-version"),
  planItems: byId("plan-items"),
  planReview: byId("plan-review"),
  planEditor: byId("plan-editor"),
  planChanges: byId("plan-changes"),
  planError: byId("plan-error"),
  planApprove: byId("plan-approve"),
  noteCard: byId("note-card"),
  noteForm: byId("note-form"),
  noteText: byId("note-text"),
  noteTarget: byId("note-target"),
  noteError: byId("note-error"),
  noteStatus: byId("note-status"),
  cancelDialog: byId("cancel-dialog"),
  cancelQuestion: byId("cancel-question"),
  cancelConfirm: byId("cancel-confirm"),
  treeCard: byId("tree-card"),
  viewTree: byId("view-tree"),
  viewList: byId("view-list"),
};

// Exposed on window.canopy for tests and for anyone debugging a page.
const state = createState(config);
window.canopy = state;

function announce(text) {
  const line = document.createElement("p");
  line.textContent = text;
  page.announcer.appendChild(line);
  while (page.announcer.childNodes.length > 4) page.announcer.removeChild(page.announcer.firstChild);
}

function select(runId) {
  if (!state.select(runId)) {
    panel.switchTo();
    return;
  }
  const url = new URL(window.location.href);
  if (runId === state.root) url.searchParams.delete("agent");
  else url.searchParams.set("agent", runId);
  history.replaceState(null, "", url);
  announce(`Showing ${agentName(state.runs.get(runId))}.`);
  panel.switchTo();
}

const tree = createTree(
  state,
  {
    tree: byId("tree"),
    links: document.querySelector("#tree .layer-links"),
    arrows: document.querySelector("#tree .layer-messages"),
    nodes: document.querySelector("#tree .layer-nodes"),
  },
  select
);
const list = createAgentList(state, byId("agent-list"), select);
const feed = createFeed(state, byId("message-feed"), byId("feed-empty"), config.documents);
const panel = createPanel(state, page.panel, config);
const plan = createPlan(state, page, config, announce);
const tiles = createTiles(state, page);
const actions = createActions(state, page, config, announce);
const stage = createReportStage(state, page, config);
const clarify = createClarify(state, byId, config, announce);

// The tree or the list: the list is the default on a narrow screen, where the tree's text
// would shrink below reading size.
function showView(view) {
  page.treeCard.dataset.view = view;
  page.viewTree.setAttribute("aria-pressed", view === "tree" ? "true" : "false");
  page.viewList.setAttribute("aria-pressed", view === "list" ? "true" : "false");
}
page.viewTree.addEventListener("click", () => showView("tree"));
page.viewList.addEventListener("click", () => showView("list"));
showView(window.matchMedia("(max-width: 720px)").matches ? "list" : "tree");

function concernsPanel(event) {
  if (event.type === "snapshot" || event.run === state.selected) return true;
  return event.type === "run.message" && (event.to === state.selected || state.selected === state.root);
}

function narrate(event) {
  const run = state.runs.get(event.run);
  if (!run) return;
  if (event.type === "run.created" && run.parent_id !== null) {
    announce(`${agentName(state.runs.get(run.parent_id))} started sub-agent ${agentName(run)}.`);
  } else if (movesOn(event) && event.run === state.selected) {
    announce(`${agentName(run)} is ${event.state}${event.detail ? ": " + event.detail : ""}.`);
  } else if (event.type === "run.message") {
    if (event.from_analyst) announce(`Your note reached ${event.to_name || "the root agent"}.`);
    else {
      tree.freshArrow(`${event.run}-${event.to}`);
      announce(`${event.from_name} sent a message to ${event.to_name}.`);
    }
  } else if (event.type === "run.finished") {
    announce(`${agentName(run)} ${run.ending === "done" ? "finished" : endingWord(run)}${run.error ? `: ${run.error}` : ""}.`);
  }
}

function render() {
  tiles.render();
  tree.render();
  list.render();
  feed.render();
  plan.render();
  clarify.render();
  actions.render();
  stage.render();
  panel.render();
}

state.subscribe((events) => {
  let panelToo = false;
  let planToo = false;
  for (const event of events) {
    if (event.seq) narrate(event);
    if (concernsPanel(event)) panelToo = true;
    // A plan item's status follows its sub-agents, and the root's review state the plan.
    const treeChanged = event.type === "run.created" || event.type === "run.finished";
    const rootChanged = movesOn(event) && event.run === state.root;
    if (event.type === "run.plan" || (state.plan && state.plan.version !== null && (treeChanged || rootChanged))) {
      planToo = true;
    }
  }
  render();
  if (panelToo) panel.soon();
  if (planToo) plan.soon();
});

state.applySnapshot(config.snapshot);
plan.load();
panel.load();
follow(state, config, page.connection);
// The worked time grows while the clock runs; nothing else changes between events.
setInterval(() => tiles.tick(), 1000);
