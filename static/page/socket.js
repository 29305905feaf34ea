// The websocket: the snapshot or the events after the last one applied, then live events. A
// dropped socket reconnects with backoff and asks for what came after the last number.
//
// Its indicator says whether the page follows the research: "Live" while the research works
// and the socket is open. Once the research has ended an open socket only keeps the page up
// to date (a resume would go on live): the indicator says the research ended instead, in
// grey (data-ended), not a green "Live" that reads as still running.
import { endingWord } from "./format.js";

const MAX_BACKOFF_MS = 10000;
const CLOSE_REASONS = {
  4401: "Signed out: log in again to follow this research.",
  4404: "This research is not available.",
};
const OFFLINE = "Offline: reconnects when the network is back";

export function follow(state, config, connection) {
  let attempts = 0;
  let stopped = false;
  let timer = null;

  let shown = { kind: "connecting", text: connection.textContent };

  function show(kind, text) {
    shown = { kind, text };
    paint();
  }

  function paint() {
    const root = state.rootRun();
    const ended = shown.kind === "live" && root && !root.active;
    connection.dataset.state = shown.kind;
    if (ended) connection.dataset.ended = "";
    else delete connection.dataset.ended;
    const text = ended ? `Research ${endingWord(root)}` : shown.text;
    if (connection.textContent !== text) connection.textContent = text;
  }
  state.subscribe(paint); // the research ends, or a resume sets it going again

  function connect() {
    timer = null;
    if (stopped) return;
    if (!navigator.onLine) {
      show("offline", OFFLINE);
      return; // the "online" event reconnects
    }
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${window.location.host}${config.socket}?after=${state.lastSeq}`);
    state.socket = socket;
    socket.addEventListener("open", () => {
      attempts = 0;
      show("live", "Live");
    });
    socket.addEventListener("message", (message) => {
      const data = JSON.parse(message.data);
      if (data.type === "snapshot") state.applySnapshot(data);
      else if (typeof data.seq === "number") state.receive(data);
    });
    socket.addEventListener("close", (event) => {
      if (state.socket === socket) state.socket = null;
      if (CLOSE_REASONS[event.code]) {
        stopped = true;
        show("closed", CLOSE_REASONS[event.code]);
        return;
      }
      reconnect();
    });
  }

  function reconnect() {
    if (stopped || timer) return;
    const delay = Math.min(MAX_BACKOFF_MS, 500 * 2 ** attempts) * (0.75 + Math.random() * 0.5);
    attempts += 1;
    state.reconnects += 1;
    show("reconnecting", "Reconnecting…");
    timer = setTimeout(connect, delay);
  }

  window.addEventListener("online", () => {
    if (stopped || state.socket) return;
    clearTimeout(timer);
    attempts = 0;
    connect();
  });
  window.addEventListener("offline", () => show("offline", OFFLINE));
  window.addEventListener("pagehide", () => {
    stopped = true;
    if (state.socket) state.socket.close();
  });
  window.addEventListener("pageshow", (event) => {
    if (!event.persisted) return; // restored from the back-forward cache: follow again
    stopped = false;
    attempts = 0;
    connect();
  });
  connect();
}
