// The messages between agents, and the analyst's notes: text, never markup; the addresses
// in them are links (a source a sibling names is one click away).
import { appendLinked, clockTime } from "./format.js";

export function createFeed(state, feed, empty, titles = {}) {
  return {
    render() {
      const shown = new Set();
      feed.querySelectorAll("li[data-message-id]").forEach((item) => shown.add(Number(item.dataset.messageId)));
      const messages = Array.from(state.messages.values()).sort((a, b) => a.id - b.id);
      for (const message of messages) {
        if (shown.has(message.id)) continue;
        const item = document.createElement("li");
        item.className = "feed-item" + (message.from_analyst ? " note" : "");
        item.dataset.messageId = message.id;
        const meta = document.createElement("p");
        meta.className = "feed-meta";
        const from = document.createElement("strong");
        from.textContent = message.from_analyst ? "the analyst" : message.from_name;
        const to = document.createElement("strong");
        to.textContent = message.to_name || "root";
        const time = document.createElement("time");
        time.className = "muted";
        time.dateTime = message.sent_at;
        time.textContent = clockTime(message.sent_at);
        meta.append(from, " → ", to, " ", time);
        const text = document.createElement("p");
        text.className = "feed-text prewrap";
        appendLinked(text, message.text, feed.dataset.passageUrl, titles);
        item.append(meta, text);
        feed.appendChild(item);
      }
      empty.hidden = messages.length > 0;
    },
  };
}

/** The server writes times as UTC ISO in <time datetime>: show them in the analyst's locale. */
export function localiseTimes(container) {
  container.querySelectorAll("time[data-clock]").forEach((time) => {
    time.textContent = clockTime(time.dateTime);
  });
}
