// Questions before starting (issue 27): a research started with "Clarify before starting"
// may wait for the analyst's answers to its lead's questions. While it waits, the questions
// sit first on the page with one answer box each; once answered (or skipped) the card keeps
// what was asked and answered, as the exports do.
import { postJson } from "./http.js";

export function createClarify(state, byId, config, announce) {
  const card = byId("clarify-card");
  const form = byId("clarify-form");
  const fields = byId("clarify-fields");
  const error = byId("clarify-error");
  const send = byId("clarify-send");
  const skip = byId("clarify-skip");
  const answered = byId("clarify-answers");
  const skipped = byId("clarify-skipped");
  let drawn = ""; // the questions whose answer boxes are on the page: typing survives redraws

  function boxes(questions) {
    const key = JSON.stringify(questions);
    if (key === drawn) return;
    drawn = key;
    fields.replaceChildren(
      ...questions.map((question, index) => {
        const field = document.createElement("div");
        field.className = "field";
        const label = document.createElement("label");
        label.htmlFor = `clarify-answer-${index + 1}`;
        label.textContent = `${index + 1}. ${question}`;
        const box = document.createElement("textarea");
        box.id = `clarify-answer-${index + 1}`;
        box.rows = 2;
        box.maxLength = 2000;
        box.className = "clarify-answer";
        field.append(label, box);
        return field;
      })
    );
  }

  function answers(clarification) {
    const rows = [];
    clarification.questions.forEach((question, index) => {
      const term = document.createElement("dt");
      term.textContent = question;
      const answer = document.createElement("dd");
      const text = (clarification.answers || [])[index] || "";
      answer.textContent = text || (clarification.skipped ? "(skipped)" : "(not answered)");
      if (!text) answer.className = "muted";
      rows.push(term, answer);
    });
    answered.replaceChildren(...rows);
  }

  function render() {
    const root = state.rootRun();
    const clarification = root && root.clarification;
    card.hidden = !clarification;
    if (!clarification) return;
    const waiting = clarification.answers === null && root.status === "paused";
    card.classList.toggle("awaiting", waiting);
    form.hidden = !waiting;
    if (waiting) boxes(clarification.questions);
    answered.hidden = waiting;
    skipped.hidden = !clarification.skipped;
    if (!waiting) answers(clarification);
  }

  async function reply(body, words) {
    send.disabled = skip.disabled = true;
    error.hidden = true;
    try {
      const run = await postJson(config.clarify, body);
      // The answers are final: shown now, before the socket's events (which say the same).
      state.patch(run.id, { clarification: run.clarification });
      announce(words);
    } catch (failure) {
      error.textContent = failure.message;
      error.hidden = false;
    } finally {
      send.disabled = skip.disabled = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const given = Array.from(fields.querySelectorAll("textarea"), (box) => box.value);
    reply({ answers: given }, "Answers sent: the research starts.");
  });
  skip.addEventListener("click", () => reply({ skip: true }, "Questions skipped: the research starts."));

  return { render };
}
