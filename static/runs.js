// The runs list (templates/runs.html): each working research's status, agents (how many, how
// many done), cost and time worked, refreshed every few seconds until none is working. When one
// changes status (it pauses for review, resumes, ends), its row is read again from the REST
// API, whose `ending` says how it ended: a cancelled research reads cancelled, not failed.
// A row drawn here reads as the server draws it after a reload, word for word.
import { duration, endingTone, endingWord, usd, waitingWord } from "./page/format.js";

(function () {
  "use strict";

  const POLL_MS = 3000;
  const NEWER_MS = 5000;

  // The one wording of durations (static/page/format.js, frontend/rendering.py duration_text).
  function durationText(seconds) {
    if (seconds === null || seconds === undefined || seconds === "") return "";
    return duration(Number(seconds));
  }

  function runsList(table, progressUrl) {
    const detailUrl = (id) => table.dataset.detailUrl.replace(/0$/, String(id));
    // Worked time as the server last said it, and when: the clock ticks on from there.
    const clocks = new Map();

    function activeRows() {
      return Array.from(table.querySelectorAll("tr[data-run-id] td[data-active]"), (cell) => cell.closest("tr"));
    }

    function setClock(row, worked, running) {
      clocks.set(row.dataset.runId, { worked, running, at: Date.now() });
    }

    function worked(row) {
      const clock = clocks.get(row.dataset.runId);
      if (!clock || clock.worked === null) return null;
      return clock.worked + (clock.running ? (Date.now() - clock.at) / 1000 : 0);
    }

    function badge(row, label, tone) {
      const element = row.querySelector("[data-status]");
      element.textContent = label;
      element.className = `badge status-${tone}`;
    }

    function progressLine(row) {
      let line = row.querySelector("[data-progress]");
      if (!line) {
        line = document.createElement("span");
        line.className = "progress-line muted";
        line.dataset.progress = "";
        row.querySelector("[data-status]").parentElement.append(line);
      }
      return line;
    }

    // The Agents column, as runs.html draws it: the noun shows where no heading does (a phone).
    // Its cell is the row's one with such a noun.
    function showAgentCount(row, total) {
      const noun = row.querySelector(".phone-only");
      noun.textContent = ` agent${total === 1 ? "" : "s"}`;
      noun.parentElement.replaceChildren(String(total), noun);
      // The row's delete question counts them too ("Delete this research, its 4 agents, ...").
      const question = row.querySelector(".confirm-box p");
      if (question) question.textContent = question.textContent.replace(/its \d+ agents?,/, `its ${total}${noun.textContent},`);
    }

    // What the agent is doing, beside the badge while it works; none while it waits or ended.
    function showState(row, text) {
      let state = row.querySelector("[data-state]");
      if (text === null) {
        if (state) state.remove();
        return;
      }
      if (!state) {
        state = document.createElement("span");
        state.className = "muted";
        state.dataset.state = "";
        row.querySelector("[data-status]").after(" ", state);
      }
      state.textContent = text;
    }

    function showProgress(row, progress) {
      const cell = row.querySelector("[data-active]");
      cell.dataset.agents = progress.agents_text;
      progressLine(row).textContent = `${cell.dataset.agents} · ${durationText(worked(row)) || "not started"}`;
      showState(row, progress.status === "paused" ? null : progress.state);
    }

    // The run as the REST API has it: status, ending, time worked.
    function showRun(row, run) {
      const cell = row.querySelector("[data-active]");
      setClock(row, run.worked_seconds, run.clock_running);
      row.querySelector("[data-tree-cost]").textContent = usd(run.tree_cost_usd);
      if (run.active) {
        if (run.status === "paused") {
          badge(row, waitingWord(run), "paused");
          showState(row, null);
        } else {
          badge(row, run.status, run.status);
          showState(row, run.state);
        }
        return;
      }
      badge(row, endingWord(run), endingTone(run.ending));
      showState(row, null);
      delete cell.dataset.active;
      // An ended research says how long it took, and nothing when it never started.
      const time = durationText(run.worked_seconds);
      if (time) progressLine(row).textContent = `took ${time}`;
      else row.querySelectorAll("[data-progress]").forEach((line) => line.remove());
    }

    async function reread(row) {
      const response = await fetch(detailUrl(row.dataset.runId), { headers: { Accept: "application/json" } });
      if (response.ok) showRun(row, await response.json());
    }

    async function poll() {
      const rows = activeRows();
      if (!rows.length) return;
      const ids = rows.map((row) => row.dataset.runId).join(",");
      try {
        const response = await fetch(`${progressUrl}?ids=${ids}`, { headers: { Accept: "application/json" } });
        if (response.ok) {
          const body = await response.json();
          await Promise.all(rows.map(async (row) => {
            const progress = body.runs[row.dataset.runId];
            if (!progress) return;
            const cell = row.querySelector("[data-active]");
            cell.dataset.agents = progress.agents_text; // frontend/progress.py agents_text
            showAgentCount(row, progress.agents);
            row.querySelector("[data-tree-cost]").textContent = usd(progress.tree_cost_usd);
            if (cell.dataset.lastStatus !== progress.status) {
              cell.dataset.lastStatus = progress.status;
              await reread(row);
            }
            if (row.querySelector("[data-active]")) showProgress(row, progress);
          }));
        }
      } catch (error) {
        // Offline for a moment: the next poll tries again.
      }
      if (activeRows().length) setTimeout(poll, POLL_MS);
    }

    // The worked time ticks each second between polls.
    function tick() {
      activeRows().forEach((row) => {
        const cell = row.querySelector("[data-active]");
        const clock = clocks.get(row.dataset.runId);
        if (!clock || !clock.running || !cell.dataset.agents) return;
        progressLine(row).textContent = `${cell.dataset.agents} · ${durationText(worked(row))}`;
      });
    }

    activeRows().forEach((row) => {
      const cell = row.querySelector("[data-active]");
      const value = cell.dataset.worked;
      setClock(row, value === "" || value === undefined ? null : Number(value), "clockRunning" in cell.dataset);
    });
    if (activeRows().length) {
      setTimeout(poll, POLL_MS);
      setInterval(tick, 1000);
    }
  }

  // Researches started after the list was drawn (another tab, the API, the command line):
  // the list says how many, with the way to show them, instead of staying as it was.
  function watchForNewer(progressUrl, newest, notice) {
    async function look() {
      if (document.visibilityState === "visible") {
        try {
          const response = await fetch(`${progressUrl}?newest=${newest}`, { headers: { Accept: "application/json" } });
          const count = response.ok ? (await response.json()).newer : 0;
          if (count > 0) {
            const link = document.createElement("a");
            // The first page of them all: a search or an older page may not hold the new ones.
            link.href = location.pathname;
            link.textContent = "Show the newest";
            const words = count === 1 ? "1 research was" : `${count} researches were`;
            notice.replaceChildren(`${words} started since this list was drawn. `, link);
            notice.hidden = false;
          }
        } catch (error) {
          // Offline for a moment: the next look tries again.
        }
      }
      setTimeout(look, NEWER_MS);
    }
    setTimeout(look, NEWER_MS);
  }

  const script = document.querySelector("script[data-progress-url]");
  const table = document.querySelector("table.runs-table[data-detail-url]");
  if (table && script && script.dataset.progressUrl) runsList(table, script.dataset.progressUrl);
  const notice = document.getElementById("newer-runs");
  if (script && notice && script.dataset.newest !== undefined) {
    watchForNewer(script.dataset.progressUrl, Number(script.dataset.newest), notice);
  }
})();
