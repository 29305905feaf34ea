// The lead's plan (a checklist whose items follow their sub-agents) and its review: while the
// research waits for the analyst, the plan sits first on the page with a primary Approve.
import { endingWord, STOPPED_ENDINGS as STOPPED } from "./format.js";
import { postJson, getJson } from "./http.js";

const MARKS = {
  open: "○", working: "◐", checking: "…", covered: "✓", failed: "✗", gap: "!",
  cancelled: "–", interrupted: "–", out_of_time: "–", stopped: "–",
};
// What the server said of an item once its agents had ended.
const JUDGED = new Set(["covered", "gap"]);
// "1. ", "2) ", "- ", "* " at the head of a pasted line: the page numbers items itself.
const LIST_MARK = /^\s*(?:\d+[.)]|[-*•])\s+/;

export function planLines(text) {
  return text
    .split("\n")
    .map((line) => line.replace(LIST_MARK, "").trim())
    .filter(Boolean);
}

/** A revision of the plan the analyst approved, in words: what it adds and removes. */
export function changesText(changes) {
  const quoted = (items) => items.map((item) => `“${item}”`).join(", ");
  const parts = [];
  if (changes.added.length) parts.push(`adds ${quoted(changes.added)}`);
  if (changes.removed.length) parts.push(`removes ${quoted(changes.removed)}`);
  const what = parts.length ? parts.join(" and ") : "rewords it";
  return `The lead revised the plan you approved (version ${changes.since_version}): it ${what}.`;
}

export function createPlan(state, page, config, announce) {
  let timer = null;
  let edited = null; // the version whose items are in the review editor
  let asked = 0; // a later answer wins: one still in flight is dropped when it lands

  async function load() {
    const mine = ++asked;
    try {
      const plan = await getJson(config.plan);
      if (mine === asked) state.setPlan(plan);
    } catch (error) {
      // The next event tries again.
    }
  }

  // An item's status follows its sub-agents as the tree shows them, in the same frame (the
  // rule of research/selectors/plans.py item_status). Only the server knows whether an agent
  // that ended done cited a source its tree saw (covered) or found nothing (a gap), and
  // whether the lead researched an item no sub-agent took: there the page keeps the server's
  // word, and says "checking" until the plan reloaded after that agent's end brings it.
  function live(entry) {
    const root = state.rootRun();
    const covering = state.list().filter((run) => run.parent_id !== null && run.plan_item === entry.text);
    if (!covering.length) return entry;
    let status;
    if (covering.some((run) => run.active)) status = "working";
    else if (covering.some((run) => run.ending === "done")) status = JUDGED.has(entry.status) ? entry.status : "checking";
    else if (root && root.ending === "done") status = "gap";
    else status = stoppedAlike(covering) || "failed";
    const agents = covering.map((run) => ({ id: run.id, name: run.name, status: run.status }));
    return { ...entry, status, agents };
  }

  // The API says "failed" for an item whose agents all ended without covering it; agents that
  // were cancelled, interrupted or ran out of time did not fail at it: the item says how they
  // ended, in the tree's words ("stopped" when they were stopped in different ways).
  function stoppedAlike(covering) {
    const endings = new Set(covering.map((run) => run.ending));
    if (![...endings].every((ending) => STOPPED.has(ending))) return null;
    return endings.size === 1 ? [...endings][0] : "stopped";
  }

  function item(planned) {
    const entry = live(planned);
    const li = document.createElement("li");
    li.className = "plan-item";
    li.dataset.status = entry.status;
    const mark = document.createElement("span");
    mark.className = "plan-mark";
    mark.setAttribute("aria-hidden", "true");
    mark.textContent = MARKS[entry.status] || "•";
    const text = document.createElement("span");
    text.className = "plan-text";
    text.textContent = `${entry.number}. ${entry.text.replace(LIST_MARK, "")}`;
    const status = document.createElement("span");
    status.className = "badge plan-status";
    // Open in a research that ended without its report: nobody will take it now.
    const root = state.rootRun();
    if (entry.status === "open" && root && !root.active) status.textContent = "not started";
    else if (STOPPED.has(entry.status)) status.textContent = endingWord({ ending: entry.status });
    else if (entry.status === "stopped") status.textContent = "stopped";
    else status.textContent = entry.status;
    const body = document.createElement("span");
    body.className = "plan-body";
    body.append(text, " ", status);
    if (entry.agents.length) {
      const agents = document.createElement("span");
      agents.className = "plan-agents muted";
      agents.textContent = ` by ${entry.agents.map((agent) => agent.name).join(", ")}`;
      body.append(agents);
    }
    li.append(mark, body);
    return li;
  }

  function render() {
    const plan = state.plan;
    page.planCard.hidden = !plan || plan.version === null;
    if (!plan || plan.version === null) return;
    page.planVersion.textContent = `version ${plan.version}${plan.approved ? " · approved" : ""}`;
    page.planItems.replaceChildren(...plan.items.map(item));
    page.planReview.hidden = !plan.awaiting_review;
    page.planChanges.hidden = !plan.changes;
    page.planChanges.textContent = plan.changes ? changesText(plan.changes) : "";
    page.planCard.classList.toggle("awaiting", Boolean(plan.awaiting_review));
    // The editor is filled once per version, so an analyst's edits survive refreshes.
    if (plan.awaiting_review && edited !== plan.version) {
      page.planEditor.value = plan.items.map((entry) => entry.text.replace(LIST_MARK, "")).join("\n");
      edited = plan.version;
    }
  }

  // Numbered lines pasted into the editor lose their numbers: the plan numbers its items.
  page.planEditor.addEventListener("paste", (event) => {
    const text = (event.clipboardData || window.clipboardData).getData("text");
    if (!text || !text.split("\n").some((line) => LIST_MARK.test(line))) return;
    event.preventDefault();
    const clean = text
      .split("\n")
      .map((line) => line.replace(LIST_MARK, ""))
      .join("\n");
    const editor = page.planEditor;
    editor.setRangeText(clean, editor.selectionStart, editor.selectionEnd, "end");
    editor.dispatchEvent(new Event("input", { bubbles: true }));
  });

  page.planApprove.addEventListener("click", async () => {
    const items = planLines(page.planEditor.value);
    page.planApprove.disabled = true;
    page.planError.hidden = true;
    try {
      asked += 1; // a refresh asked before the approval must not show the review again
      state.setPlan(await postJson(config.approve, { items }));
      announce("Plan approved: the research resumes.");
    } catch (error) {
      page.planError.textContent = error.message;
      page.planError.hidden = false;
    } finally {
      page.planApprove.disabled = false;
    }
  });

  return {
    load,
    render,
    soon() {
      if (timer) return;
      timer = setTimeout(() => {
        timer = null;
        load();
      }, 300);
    },
  };
}
