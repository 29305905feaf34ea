// The header of the run page: the status badge, the tiles, the tab's title, the notification
// at the end and the buttons that only make sense while the research is active.
import { count, duration, endingWord, plural, usd, waitingForYou, waitingWord } from "./format.js";

// A tile's words while the research waits for the analyst: its clock stopped, its agents
// idle (frontend/progress.py says it first).
const WAITING = waitingForYou;
// The tab's title once the research ended marks the two endings that need no reading.
const TITLE_MARKS = { done: "✓ ", failed: "✗ " };

function capitalized(text) {
  return text ? text[0].toUpperCase() + text.slice(1) : text;
}

/** An agent's time worked as the header and the agent panel say it: its clock stops while
 * the research waits for the analyst (frontend/views.py agent_panel draws it first). */
export function workedText(state, run) {
  return duration(state.workedSeconds(run)) + (run.status === "paused" ? ` · ${WAITING}` : "");
}

/** Draw every agent's clock within `container`: an element with `data-clock-of` (its run's
 * id) shows that agent's time worked. */
export function drawClocks(state, container) {
  container.querySelectorAll("[data-clock-of]").forEach((clock) => {
    const run = state.runs.get(Number(clock.dataset.clockOf));
    if (run) clock.textContent = workedText(state, run);
  });
}

/** The research's badge in words (frontend/library.py status_label draws it first). */
export function rootStatusText(root) {
  if (!root.active) return endingWord(root);
  return root.status === "paused" ? waitingWord(root) : root.status;
}

/** The Messages tile: the agents' messages, then the analyst's notes apart ("4 · 1 note"), as
 * frontend/progress.py messages_text draws it for the first paint. */
export function messagesText(messages) {
  let total = 0;
  let notes = 0;
  for (const message of messages) {
    total += 1;
    if (message.from_analyst) notes += 1;
  }
  const text = String(total - notes);
  return notes ? `${text} · ${plural(notes, "note")}` : text;
}

export function createTiles(state, page) {
  const baseTitle = document.title;
  const canNotify = "Notification" in window;
  let wasActive = null;
  let wasPaused = false;

  page.notify.addEventListener("click", () => {
    Notification.requestPermission().then(() => render());
  });

  function notify(title, root, tag) {
    if (!canNotify || Notification.permission !== "granted") return;
    const topic = root.topic.length > 120 ? `${root.topic.slice(0, 119)}…` : root.topic;
    new Notification(title, { body: topic, tag: `canopy-${root.id}${tag}` });
  }

  function renderClock(root) {
    page.elapsed.textContent = workedText(state, root);
  }

  // The clock alone, between renders: the rest of the header changes only with the tree and
  // the list, in the same frame, so that they never disagree (an event applied to the state
  // is drawn at the next frame; a tick that redrew the tiles could show it before the tree).
  // The page's other clocks (the agent panel's) tick in the same beat as the header's: on a
  // timer of their own they could say a second more than it for the same agent.
  function tick() {
    const root = state.rootRun();
    if (root) renderClock(root);
    drawClocks(state, page.run);
  }

  function render() {
    const root = state.rootRun();
    if (!root) return;
    const tally = state.tally();
    const paused = root.status === "paused";
    page.cost.textContent = usd(root.tree_cost_usd);
    page.tokens.textContent = `${count(tally.input)} in · ${count(tally.output)} out`;
    let agents = String(tally.total);
    if (paused) agents += ` · ${WAITING}`;
    else if (tally.working) agents += ` · ${tally.working} working`;
    page.agents.textContent = agents;
    // "done" while every agent that ended ended well; a cancelled one is not done.
    const word = tally.ended === tally.done ? "done" : "ended";
    page.done.textContent = `${tally.ended} of ${plural(tally.total, "agent")} ${word}`;
    renderClock(root);
    page.messageCount.textContent = messagesText(state.messages.values());

    page.status.textContent = rootStatusText(root);
    page.status.className = `badge ${root.active ? `status-${root.status}` : `ending-${root.ending}`}`;
    page.run.dataset.status = root.status;
    if (root.active) delete page.run.dataset.ending;
    else page.run.dataset.ending = root.ending;
    page.cancel.hidden = !root.active;
    page.resume.hidden = root.active || !root.resumable;
    page.exports.forEach((link) => {
      link.hidden = root.active || !root.report;
    });
    page.noteCard.hidden = !root.active;
    page.notify.hidden = !(canNotify && root.active && Notification.permission === "default");

    const waiting = waitingWord(root);
    if (paused) document.title = `⏸ ${capitalized(waiting)} · ${baseTitle}`;
    else if (!root.active) document.title = `${TITLE_MARKS[root.ending] || ""}${capitalized(endingWord(root))} · ${baseTitle}`;
    else document.title = baseTitle;
    const asks = root.state === "clarifying";
    if (paused && !wasPaused) notify(asks ? "Questions waiting for your answers" : "Plan waiting for your review", root, asks ? "-clarify" : "-plan");
    if (wasActive === true && !root.active) notify(`Research ${endingWord(root)}`, root, "");
    wasPaused = paused;
    wasActive = root.active;
  }

  return { render, tick };
}
