// One way to write figures on the run page: the feed, the panel, the tiles and the tree all
// format through here, so "00:50:13" never sits beside "12:50:13 AM".

const clockFormat = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});

/** A moment as the analyst's locale writes a time of day, seconds included. */
export function clockTime(value) {
  const moment = value instanceof Date ? value : new Date(value);
  return Number.isNaN(moment.getTime()) ? "" : clockFormat.format(moment);
}

/** "under 1 s", "3 s", "2 min 05 s", "1 h 02 min"; "not started" for null
 * (frontend/rendering.py duration_text). */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "not started";
  if (seconds > 0 && seconds < 1) return "under 1 s";
  const total = Math.max(0, Math.floor(seconds));
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const rest = total % 60;
  const two = (value) => String(value).padStart(2, "0");
  if (hours) return `${hours} h ${two(minutes)} min`;
  if (minutes) return `${minutes} min ${two(rest)} s`;
  return `${rest} s`;
}

/** Steps as the budget reads them: the last round past the budget writes the report. The
 * noun agrees with the budget: "0 of 1 step", "1 of 10 steps" (frontend/rendering.py
 * steps_text). */
export function stepsText(run) {
  const budget = Number(run.max_steps || 0);
  const steps = Number(run.steps || 0);
  if (steps > budget) return `${budget} of ${plural(budget, "step")} + report`;
  return `${steps} of ${plural(budget, "step")}`;
}

export function usd(value) {
  const amount = Number(value || 0);
  if (amount === 0) return "$0.00";
  if (amount >= 1) {
    return "$" + amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }
  return "$" + amount.toFixed(amount >= 0.01 ? 4 : 6);
}

export function count(value) {
  return Number(value || 0).toLocaleString("en-US");
}

export function plural(number, word) {
  return `${number} ${word}${number === 1 ? "" : "s"}`;
}

export function clip(text, limit) {
  text = String(text || "");
  return text.length <= limit ? text : text.slice(0, limit - 1) + "…";
}

export function agentName(run) {
  return run && run.name ? run.name : "root";
}

// The server's words for what the scripts redraw (frontend/words.py), carried by every page:
// each ending's word and badge colour, the endings that read as stopped, what a paused
// research waits for.
const WORDS = readWords();

function readWords() {
  const element = typeof document === "undefined" ? null : document.getElementById("canopy-words");
  const none = { endings: {}, tones: {}, stopped: [], needs: { answers: "", review: "" }, waiting: "" };
  return element ? JSON.parse(element.textContent) : none;
}

/** Endings of agents that were stopped, not failed at their work (research/endings.py STOPPED). */
export const STOPPED_ENDINGS = new Set(WORDS.stopped);

// How an agent reads in one word: what it does while active, how it ended after.
export function endingWord(run) {
  return WORDS.endings[run.ending] || run.ending || run.status;
}

/** The colour of an ended research's badge on the runs list (frontend/library.py). */
export function endingTone(ending) {
  return WORDS.tones[ending] || "failed";
}

/** What a research waiting for the analyst waits for: answers to its lead's questions, else
 * its plan's review (frontend/library.py status_label). "Waiting for you" (`waitingForYou`) is
 * left to where the kind is not known: the agents tile. */
export function waitingWord(run) {
  return run.state === "clarifying" ? WORDS.needs.answers : WORDS.needs.review;
}

export const waitingForYou = WORDS.waiting;

/** The class that colours a run: its state while active, its ending after. */
export function lookOf(run) {
  if (run.active) return run.status === "paused" ? "paused" : `state-${run.state}`;
  return `ending-${run.ending || "failed"}`;
}

// Addresses in a text, as research/services/citations.py BARE_URL finds them (one level of
// balanced parentheses is part of one); what ends a sentence around one is not (clean_url).
const ADDRESS = /(?:https?|kb):\/\/(?:[^\s()<>[\]{}"'`|\\^]|\([^\s()<>]*\))+/gi;
const TRAILING = ".,;:!?*_~'\"»”’";
const CHUNK = /^kb:\/\/dataset\/(\d+)\/document\/(\d+)#(\d+)$/;

function cleanAddress(address) {
  let end = address.length;
  const count = (text, char) => text.split(char).length - 1;
  while (end > 0) {
    const last = address[end - 1];
    const open = address.slice(0, end);
    if (TRAILING.includes(last) || (last === ")" && count(open, "(") < count(open, ")"))) end -= 1;
    else break;
  }
  return address.slice(0, end);
}

/** How a message names a kb:// passage, counted from 1 as the passage's page counts: "Tidal
 * bores, passage 2" by its document's heading when `titles` (document id -> heading) has it,
 * else "passage 2 of document 7" (frontend/passages.py passage_label; research/fulltext.py
 * passage_name). */
export function passageLabel(address, titles = {}) {
  const chunk = CHUNK.exec(address);
  if (!chunk) return address;
  const passage = Number(chunk[3]) + 1;
  const title = Object.hasOwn(titles, chunk[2]) ? titles[chunk[2]] : "";
  return title ? `${title}, passage ${passage}` : `passage ${passage} of document ${chunk[2]}`;
}

/**
 * Append `text` to `element` as text, its addresses as links: a web address opens its page,
 * a kb:// address its passage, through `passagePattern` ("/kb/{dataset}/documents/{document}/
 * passages/{position}/", the server's passage_href_pattern), named in words (passageLabel,
 * with `titles`: the research's knowledge base's headings, the page's config `documents`),
 * its address on hover. The agent panel's messages are linked the same way by the server
 * (frontend/templatetags/canopy.py `linked`).
 */
export function appendLinked(element, text, passagePattern, titles = {}) {
  let position = 0;
  for (const match of text.matchAll(ADDRESS)) {
    const address = cleanAddress(match[0]);
    const chunk = CHUNK.exec(address);
    let href = null;
    if (/^https?:/i.test(address)) href = address;
    else if (chunk && passagePattern) {
      href = passagePattern
        .replace("{dataset}", chunk[1])
        .replace("{document}", chunk[2])
        .replace("{position}", chunk[3]);
    }
    if (!href || address.endsWith("://")) continue;
    element.append(text.slice(position, match.index));
    const link = document.createElement("a");
    link.href = href;
    link.target = "_blank";
    link.rel = "noopener noreferrer nofollow";
    link.title = address;
    link.textContent = chunk ? passageLabel(address, titles) : address;
    element.append(link);
    position = match.index + address.length;
  }
  element.append(text.slice(position));
}
