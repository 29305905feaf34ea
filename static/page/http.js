// Requests the page makes: same origin, CSRF token, errors as sentences.

export function csrfToken() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  if (input) return input.value;
  const match = /(?:^|;\s*)csrftoken=([^;]+)/.exec(document.cookie);
  return match ? decodeURIComponent(match[1]) : "";
}

/** The first error of a refusal. The API names its field ("text must not be empty."); a
 * form names what the analyst typed instead when `nouns` has the field ({ text: "The note" }),
 * as frontend/rendering.py sentence does for the server's forms. */
export function firstError(body, nouns = {}) {
  if (!body || typeof body !== "object") return "";
  if (body.detail) return body.detail;
  const [field, first] = Object.entries(body)[0] || [];
  const text = Array.isArray(first) ? first[0] : String(first || "");
  const noun = Object.hasOwn(nouns, field) ? nouns[field] : "";
  return noun && text.startsWith(`${field} `) ? noun + text.slice(field.length) : text;
}

/** A sentence for a failed request: what the server said, or what went wrong. */
export function sentence(text) {
  text = String(text || "").trim();
  if (!text) return "";
  const capital = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?]$/.test(capital) ? capital : `${capital}.`;
}

/** POST `data` as JSON; a refusal throws its first error as a sentence (`nouns`: firstError). */
export async function postJson(url, data, nouns = {}) {
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json", "Content-Type": "application/json" },
      body: data === undefined ? undefined : JSON.stringify(data),
    });
  } catch (error) {
    throw new Error("The server did not answer. Check the connection and try again.");
  }
  let body = null;
  try {
    body = await response.json();
  } catch (error) {
    body = null;
  }
  if (!response.ok) {
    const refusal = new Error(sentence(firstError(body, nouns)) || `The server refused it (HTTP ${response.status}).`);
    refusal.status = response.status; // a 409: what was asked no longer applies
    throw refusal;
  }
  return body;
}

export async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return response.json();
}
