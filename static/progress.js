// Progress at a glance and the end of a research (frontend/progress.py formats the same way).
//
// Run page: "N of M agents done" and the elapsed time, from the tree canopy.js keeps in
// window.canopy; when the research ends, the tab's title says so, a browser notification
// shows if the analyst allowed it, and the Markdown and PDF exports appear.
// (The runs list's live status is static/runs.js.)
(function () {
  "use strict";

  // Paused: waiting for the analyst to approve the plan; not ended.
  const ACTIVE = new Set(["queued", "working", "paused"]);

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

  // --- the run page ----------------------------------------------------------------------------

  function runPage(pageElement) {
    const doneCell = document.getElementById("agents-done");
    const elapsedCell = document.getElementById("elapsed");
    const notifyButton = document.getElementById("notify-me");
    const baseTitle = document.title;
    let wasActive = null;

    const canNotify = "Notification" in window;
    function showNotifyButton(active) {
      notifyButton.hidden = !(canNotify && active && Notification.permission === "default");
    }
    notifyButton.addEventListener("click", () => {
      Notification.requestPermission().then(() => showNotifyButton(true));
    });

    function ended(root) {
      const done = root.status === "done";
      document.title = `${done ? "✓ Done" : "✗ Failed"} · ${baseTitle}`;
      pageElement.dataset.ended = root.status;
      if (done) {
        document.querySelectorAll("[data-needs-report]").forEach((link) => { link.hidden = false; });
      }
      if (canNotify && Notification.permission === "granted") {
        const topic = root.topic.length > 120 ? `${root.topic.slice(0, 119)}…` : root.topic;
        new Notification(done ? "Research done" : "Research failed", { body: topic, tag: `canopy-${root.id}` });
      }
    }

    // A research that pauses for the analyst's review asks for attention as an end does.
    let reviewAsked = false;
    function waitingForReview(root) {
      const paused = root.status === "paused";
      if (paused && !reviewAsked) {
        document.title = `⏸ Plan to review · ${baseTitle}`;
        if (canNotify && Notification.permission === "granted") {
          new Notification("Plan waiting for your review", { body: root.topic.slice(0, 120), tag: `canopy-${root.id}-plan` });
        }
      } else if (!paused && reviewAsked && ACTIVE.has(root.status)) {
        document.title = baseTitle;
      }
      reviewAsked = paused;
    }

    function tick() {
      const canopy = window.canopy;
      if (!canopy || !canopy.runs.size) return;
      const root = canopy.runs.get(canopy.root);
      if (!root) return;
      const runs = Array.from(canopy.runs.values());
      const done = runs.filter((run) => !ACTIVE.has(run.status)).length;
      doneCell.textContent = agentsText(done, runs.length);
      const start = root.started_at ? Date.parse(root.started_at) : null;
      const end = root.finished_at ? Date.parse(root.finished_at) : Date.now();
      elapsedCell.textContent = start === null ? "not started" : elapsedText(Math.max(0, end - start) / 1000);
      const active = ACTIVE.has(root.status);
      showNotifyButton(active);
      if (wasActive === true && !active) ended(root);
      if (wasActive === null && !active) pageElement.dataset.ended = root.status;
      if (active) delete pageElement.dataset.ended;
      waitingForReview(root);
      wasActive = active;
    }

    tick();
    setInterval(tick, 1000);
  }

  const runPageElement = document.getElementById("run-page");
  if (runPageElement) runPage(runPageElement);
})();
