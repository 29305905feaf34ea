// Progress at a glance and the end of a research (frontend/progress.py formats the same way).
//
// The run page's own tiles live in static/page/tiles.js.
// Runs list: the status of each working research, refreshed every few seconds until none
// is working.
(function () {
  "use strict";

  function elapsedText(seconds) {
    if (seconds === null || seconds === undefined) return "not started";
    const total = Math.floor(seconds);
    const hours = Math.floor(total / 3600);
    const minutes = Math.floor((total % 3600) / 60);
    const rest = total % 60;
    const two = (value) => String(value).padStart(2, "0");
    if (hours) return `${hours}h ${two(minutes)}m`;
    if (minutes) return `${minutes}m ${two(rest)}s`;
    return `${rest}s`;
  }

  function agentsText(done, total) {
    return `${done} of ${total} agent${total === 1 ? "" : "s"} done`;
  }

  // --- the runs list ---------------------------------------------------------------------------

  function runsList(url) {
    const POLL_MS = 3000;

    function activeRows() {
      return Array.from(document.querySelectorAll("tr[data-run-id] td[data-active]"), (cell) => cell.closest("tr"));
    }

    function show(row, progress) {
      const badge = row.querySelector("[data-status]");
      badge.textContent = progress.status;
      badge.className = `badge status-${progress.status}`;
      const state = row.querySelector("[data-state]");
      const line = row.querySelector("[data-progress]");
      if (progress.active) {
        if (state) state.textContent = progress.state;
        if (line) line.textContent = `${agentsText(progress.done, progress.agents)} · ${elapsedText(progress.elapsed_seconds)}`;
        return;
      }
      delete row.querySelector("[data-active]").dataset.active;
      if (state) state.remove();
      if (line) line.textContent = `${agentsText(progress.done, progress.agents)} · took ${elapsedText(progress.elapsed_seconds)}`;
    }

    async function poll() {
      const rows = activeRows();
      if (!rows.length) return;
      const ids = rows.map((row) => row.dataset.runId).join(",");
      try {
        const response = await fetch(`${url}?ids=${ids}`, { headers: { Accept: "application/json" } });
        if (response.ok) {
          const body = await response.json();
          rows.forEach((row) => {
            const progress = body.runs[row.dataset.runId];
            if (progress) show(row, progress);
          });
        }
      } catch (error) {
        // Offline for a moment: the next poll tries again.
      }
      if (activeRows().length) setTimeout(poll, POLL_MS);
    }

    if (activeRows().length) setTimeout(poll, POLL_MS);
  }

  const script = document.currentScript;
  if (script && script.dataset.progressUrl) runsList(script.dataset.progressUrl);
})();
