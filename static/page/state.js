// The page's one picture of the research: runs by id, messages, the plan and the last event
// applied. Every tile, node, list row, plan row and panel renders from it, so none of them
// can disagree with another. Events are applied strictly in sequence order; one that comes
// early waits for the missing ones, which are read from the REST API if they do not come.

const GAP_FILL_MS = 1500;

/** Whether an event moves its agent to a new state: a run.state, or a run.usage that carries
 * the state its model call (or its tools, when they finished in its commit) moved the agent to
 * (research/events/payloads.py, RunUsage). */
export function movesOn(event) {
  return event.type === "run.state" || (event.type === "run.usage" && event.state !== undefined);
}

export function createState(config) {
  const state = {
    root: config.root,
    runs: new Map(),
    messages: new Map(),
    plan: null,
    lastSeq: 0,
    pending: new Map(),
    selected: config.selected,
    socket: null,
    reconnects: 0,
  };
  const listeners = [];
  let gapTimer = null;
  let notifyQueued = false;

  // Listeners hear once per animation frame, with every event of the burst: ({events}).
  let burst = [];
  function changed(event) {
    if (event) burst.push(event);
    if (notifyQueued) return;
    notifyQueued = true;
    requestAnimationFrame(() => {
      notifyQueued = false;
      const events = burst;
      burst = [];
      for (const listener of listeners) listener(events);
    });
  }

  // Runs a resume made go on (issue 26), marked on the page; the root may be resumable.
  const resumed = new Set(config.resumed || []);
  function setRun(data) {
    const run = Object.assign(state.runs.get(data.id) || { detail: "" }, data);
    if (resumed.has(run.id)) run.resumed = true;
    if (run.id === config.root && run.resumable === undefined) run.resumable = Boolean(config.resumable);
    run.clockAt = performance.now();
    state.runs.set(run.id, run);
    return run;
  }

  function applySnapshot(snapshot) {
    state.runs.clear();
    for (const run of snapshot.runs) setRun(run);
    state.messages.clear();
    for (const message of snapshot.messages) state.messages.set(message.id, message);
    state.lastSeq = snapshot.seq;
    for (const seq of Array.from(state.pending.keys())) {
      if (seq <= snapshot.seq) state.pending.delete(seq);
    }
    drain();
    changed({ type: "snapshot" });
  }

  function receive(event) {
    if (event.seq <= state.lastSeq || state.pending.has(event.seq)) return;
    state.pending.set(event.seq, event);
    drain();
  }

  function drain() {
    while (state.pending.has(state.lastSeq + 1)) {
      const event = state.pending.get(state.lastSeq + 1);
      state.pending.delete(event.seq);
      apply(event);
      state.lastSeq = event.seq;
      changed(event);
    }
    if (state.pending.size && !gapTimer) {
      gapTimer = setTimeout(fillGap, GAP_FILL_MS);
    } else if (!state.pending.size && gapTimer) {
      clearTimeout(gapTimer);
      gapTimer = null;
    }
  }

  // An event that never came (a push the server dropped): read it from the stored events.
  async function fillGap() {
    gapTimer = null;
    if (!state.pending.size) return;
    try {
      const response = await fetch(`${config.events}?after=${state.lastSeq}`, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.ok) {
        for (const event of await response.json()) receive(event.payload);
      }
    } catch (error) {
      // The socket's reconnection will catch up instead.
    }
    drain();
  }

  function update(runId, fields) {
    const run = state.runs.get(runId);
    if (run) Object.assign(run, fields);
    return run;
  }

  function apply(event) {
    switch (event.type) {
      case "run.created":
        setRun(event.data);
        break;
      case "run.state": {
        // A run.state never ends a run (run.finished does): the run is active.
        const fields = { status: event.status, state: event.state, detail: event.detail || "", active: true };
        if (event.started_at) fields.started_at = event.started_at;
        if (event.resumed) Object.assign(fields, { resumed: true, resumable: false, ending: "", error: "", finished_at: null });
        const run = state.runs.get(event.run);
        if (event.worked_seconds === undefined && event.started_at && run && run.worked_seconds == null) {
          // Its start carries no worked time yet: it has worked since it started.
          fields.worked_seconds = Math.max(0, (Date.now() - Date.parse(event.started_at)) / 1000);
          fields.clock_running = event.status === "working";
          fields.clockAt = performance.now();
        }
        if (event.worked_seconds !== undefined) {
          // The clock starts or stops here: it runs while the agent works, not while it
          // waits for the analyst or for a slot.
          fields.worked_seconds = event.worked_seconds;
          fields.clock_running = event.status === "working";
          fields.clockAt = performance.now();
        }
        update(event.run, fields);
        break;
      }
      case "run.usage": {
        const fields = {
          steps: event.steps,
          input_tokens: event.input_tokens,
          output_tokens: event.output_tokens,
          cost_usd: event.cost_usd,
          tree_cost_usd: event.tree_cost_usd,
        };
        if (movesOn(event)) {
          Object.assign(fields, { status: event.status, state: event.state, detail: event.detail || "", active: true });
        }
        update(event.run, fields);
        if (event.root_tree_cost_usd !== undefined) {
          update(state.root, { tree_cost_usd: event.root_tree_cost_usd });
        }
        break;
      }
      case "run.message":
        state.messages.set(event.id, {
          id: event.id,
          run: event.run,
          to: event.to,
          from_name: event.from_name,
          to_name: event.to_name,
          text: event.text,
          sent_at: event.sent_at,
          from_analyst: Boolean(event.from_analyst),
        });
        break;
      case "run.clarify":
        update(event.run, { clarification: { questions: event.questions, answers: event.answers, skipped: event.skipped } });
        break;
      case "run.report":
        update(event.run, { report: event.report });
        break;
      case "run.finished":
        update(event.run, {
          status: event.status,
          state: event.state,
          active: false,
          ending: event.ending,
          error: event.error || "",
          finished_at: event.finished_at,
          duration_seconds: event.duration_seconds,
          worked_seconds: event.duration_seconds,
          clock_running: false,
          clockAt: performance.now(),
          tool_calls: event.tool_calls,
          detail: "",
          resumable: Boolean(event.resumable),
        });
        break;
      default:
        break; // run.plan: the plan module reads the plan again
    }
  }

  return Object.assign(state, {
    applySnapshot,
    receive,
    subscribe(listener) {
      listeners.push(listener);
    },
    /** Draw every part again at the next frame, together (a panel that just loaded). */
    redraw() {
      changed({ type: "redraw" });
    },
    /** Fields of a run the page learned from an answer of its own, drawn at the next frame. */
    patch(runId, fields) {
      update(runId, fields);
      changed({ type: "redraw" });
    },
    setPlan(plan) {
      state.plan = plan;
      changed({ type: "plan" });
    },
    select(runId) {
      if (!state.runs.has(runId) || state.selected === runId) return false;
      state.selected = runId;
      changed({ type: "select" });
      return true;
    },
    rootRun() {
      return state.runs.get(state.root);
    },
    list() {
      return Array.from(state.runs.values()).sort((a, b) => a.depth - b.depth || a.id - b.id);
    },
    /** Seconds a run worked as of now: its last figure, plus the time since while it runs. */
    workedSeconds(run) {
      if (run.worked_seconds === null || run.worked_seconds === undefined) return null;
      const since = run.clock_running ? (performance.now() - run.clockAt) / 1000 : 0;
      return run.worked_seconds + since;
    },
    /** The tally every tile reads: how many agents work, wait for the analyst, ended. */
    tally() {
      const runs = Array.from(state.runs.values());
      return {
        total: runs.length,
        working: runs.filter((run) => run.active && run.status !== "paused").length,
        paused: runs.filter((run) => run.status === "paused").length,
        ended: runs.filter((run) => !run.active).length,
        done: runs.filter((run) => run.ending === "done").length,
        input: runs.reduce((sum, run) => sum + Number(run.input_tokens || 0), 0),
        output: runs.reduce((sum, run) => sum + Number(run.output_tokens || 0), 0),
      };
    },
  });
}
