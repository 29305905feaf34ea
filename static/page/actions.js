// What the analyst does to a research: send a note, cancel it or one of its sub-agents, resume
// it when it was interrupted. Cancelling asks first, in a dialog that says what stops.
import { agentName } from "./format.js";
import { postJson } from "./http.js";

// The note form's field as the analyst reads it in a refusal: "The note must not be empty."
const NOTE_NOUNS = { text: "The note" };

export function createActions(state, page, config, announce) {
  page.noteForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const runId = state.selected || state.root;
    page.noteError.hidden = true;
    page.noteStatus.textContent = "Sending…";
    try {
      const url = config.notes.replace(/\/0\/notes$/, `/${runId}/notes`);
      await postJson(url, { text: page.noteText.value }, NOTE_NOUNS);
      page.noteText.value = "";
      page.noteStatus.textContent = `Sent to ${page.noteTarget.textContent}.`;
    } catch (error) {
      page.noteStatus.textContent = "";
      page.noteError.textContent = error.message;
      page.noteError.hidden = false;
    }
  });

  let pending = null; // {runId, button, label}: what the open dialog would cancel

  // The dialog's way out: "Keep it running" for a research at work; one waiting for the
  // analyst (its questions' answers, its plan's review) is not running, and is kept waiting.
  const keep = page.cancelDialog.querySelector('button[value="keep"]');

  function ask(runId, button, label, whole) {
    pending = { runId, button, label };
    const run = state.runs.get(runId);
    const waits = whole && run && run.status === "paused";
    if (!whole) {
      page.cancelQuestion.textContent = `Cancel the sub-agent ${label}? It stops now; its parent goes on without its report.`;
    } else if (waits) {
      const what = run.state === "clarifying" ? "your answers to its questions" : "your review of its plan";
      page.cancelQuestion.textContent = `Cancel this research? It is waiting for ${what}: cancelling ends it there, and no report is written. This cannot be undone.`;
    } else {
      page.cancelQuestion.textContent = "Cancel this research? Every agent stops now and no report is written. This cannot be undone.";
    }
    keep.textContent = waits ? "Keep it waiting" : "Keep it running";
    page.cancelConfirm.textContent = whole ? "Yes, cancel the research" : `Yes, cancel ${label}`;
    page.cancelDialog.showModal();
  }

  async function cancel({ runId, button, label }) {
    button.disabled = true;
    button.textContent = "Cancelling…";
    announce(`Cancelling ${label}.`);
    try {
      await postJson(config.cancel.replace(/\/0\/cancel$/, `/${runId}/cancel`));
    } catch (error) {
      if (error.status === 409) {
        // It ended meanwhile: nothing to cancel, and nothing to try again (its end is on its way).
        button.textContent = "Already ended";
        announce(`${label[0].toUpperCase()}${label.slice(1)} had already ended.`);
        return;
      }
      button.disabled = false;
      button.textContent = "Try cancelling again";
      announce(`Could not cancel ${label}. ${error.message}`);
    }
  }

  page.cancelDialog.addEventListener("close", () => {
    const chosen = pending;
    pending = null;
    if (chosen && page.cancelDialog.returnValue === "cancel") cancel(chosen);
  });

  page.cancel.addEventListener("click", () => ask(state.root, page.cancel, "the research", true));
  page.resume.addEventListener("click", async () => {
    page.resume.disabled = true;
    page.resume.textContent = "Resuming…";
    try {
      await postJson(config.resume);
      announce("Resumed: each agent goes on from its last completed step.");
    } catch (error) {
      announce(`Could not resume the research. ${error.message}`);
    } finally {
      page.resume.disabled = false;
      page.resume.textContent = "Resume research";
    }
  });
  page.panel.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-cancel-run]");
    if (button) ask(Number(button.dataset.cancelRun), button, button.dataset.name || "the sub-agent", false);
  });

  return {
    render() {
      const run = state.runs.get(state.selected);
      page.noteTarget.textContent = !run || run.id === state.root ? "the root agent" : agentName(run);
    },
  };
}
