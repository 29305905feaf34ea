// The knowledge-base page (templates/knowledge_base.html). Files dropped on the zone or
// chosen with the picker are uploaded one at a time through the REST API, the same request
// as `POST /v1/gb/datasets/<id>/documents`: each file shows its progress, then either its
// passages or, refused, the API's own words (wrong type, too large, empty, unreadable PDF),
// and a refused file never stops the others. A file over the size limit is not sent: the
// page asks the server whether it may be, and shows its answer in the upload's own words.
// After each file that was added, the documents list is read again from the server.
import { csrfToken, firstError, sentence } from "./page/http.js";
import { plural } from "./page/format.js";

(function () {
  "use strict";

  const zone = document.getElementById("upload-zone");
  const picker = document.getElementById("upload-files");
  const list = document.getElementById("uploads");
  const documents = document.getElementById("documents");
  if (!zone || !picker || !list || !documents) return;

  const queue = [];
  let sending = false;

  function sizeText(bytes) {
    if (bytes < 1024) return plural(bytes, "byte");
    if (bytes < 1024 * 1024) return `${Math.round(bytes / 1024)} KB`;
    return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
  }

  // The API's message names the file first ("notes.exe is not a supported type: ..."): its
  // name stays as written, not capitalised.
  function refusal(file, text) {
    text = String(text || "").trim();
    if (!text.startsWith(file.name)) return sentence(text);
    return /[.!?]$/.test(text) ? text : `${text}.`;
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function item(file) {
    const row = element("li", "upload");
    row.dataset.state = "waiting";
    const head = element("div", "upload-head");
    head.append(element("span", "upload-name", file.name), element("span", "upload-size muted", sizeText(file.size)));
    const bar = element("progress", "upload-bar");
    bar.max = 100;
    bar.value = 0;
    bar.setAttribute("aria-label", `Upload of ${file.name}`);
    const words = element("p", "upload-words", "Waiting to upload");
    row.append(head, bar, words);
    list.append(row);
    return { row, bar, words };
  }

  function show(view, state, text) {
    view.row.dataset.state = state;
    view.words.textContent = text;
    if (state === "added" || state === "refused") {
      view.bar.value = 100;
      view.words.setAttribute("role", state === "refused" ? "alert" : "status");
    }
  }

  function body(request) {
    try {
      return JSON.parse(request.responseText);
    } catch (error) {
      return null;
    }
  }

  // XMLHttpRequest, not fetch: only it reports an upload's progress.
  function send(file, view) {
    return new Promise((resolve) => {
      const request = new XMLHttpRequest();
      request.open("POST", zone.dataset.uploadUrl);
      request.setRequestHeader("X-CSRFToken", csrfToken());
      request.setRequestHeader("Accept", "application/json");
      request.upload.addEventListener("progress", (event) => {
        if (!event.lengthComputable) return;
        const percent = Math.round((event.loaded / event.total) * 100);
        view.bar.value = percent;
        show(view, "uploading", `Uploading: ${percent}%`);
      });
      request.upload.addEventListener("load", () => {
        view.bar.removeAttribute("value"); // indeterminate while the server reads it
        show(view, "reading", "Uploaded; reading the text and cutting it into passages…");
      });
      request.addEventListener("load", () => {
        const answer = body(request);
        if (request.status === 201 && answer) {
          show(view, "added", `Added: ${plural(answer.chunk_count, "passage")}, ready to search.`);
          resolve(true);
          return;
        }
        const said = firstError(answer);
        show(view, "refused", said ? refusal(file, said) : `The server refused it (HTTP ${request.status}).`);
        resolve(false);
      });
      request.addEventListener("error", () => {
        show(view, "refused", "The server did not answer. Check the connection and try again.");
        resolve(false);
      });
      const form = new FormData();
      form.append("file", file, file.name);
      show(view, "uploading", "Uploading: 0%");
      request.send(form);
    });
  }

  // A file over the limit the server gave the page: its words, or "" if it may be sent after all.
  async function tooLarge(file) {
    if (file.size <= Number(zone.dataset.maxBytes)) return "";
    const form = new URLSearchParams({ name: file.name, size: String(file.size) });
    try {
      const response = await fetch(zone.dataset.checkUrl, {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
        body: form,
      });
      if (response.ok) return "";
      return refusal(file, firstError(await response.json()));
    } catch (error) {
      return ""; // the upload itself will say what is wrong
    }
  }

  async function refreshDocuments() {
    try {
      const response = await fetch(zone.dataset.documentsUrl, { credentials: "same-origin" });
      if (response.ok) documents.innerHTML = await response.text();
    } catch (error) {
      // The list catches up on the next added file or a reload.
    }
  }

  async function drain() {
    if (sending) return;
    sending = true;
    while (queue.length) {
      const { file, view } = queue.shift();
      const refused = await tooLarge(file);
      if (refused) show(view, "refused", refused);
      else if (await send(file, view)) await refreshDocuments();
    }
    sending = false;
  }

  function add(files) {
    for (const file of files) queue.push({ file, view: item(file) });
    drain();
  }

  picker.addEventListener("change", () => {
    add(Array.from(picker.files));
    picker.value = ""; // the same file may be chosen again
  });

  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("is-over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("is-over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("is-over");
    if (event.dataTransfer && event.dataTransfer.files.length) add(Array.from(event.dataTransfer.files));
  });
  // Leaving while files are still on their way would drop them: the browser asks first.
  window.addEventListener("beforeunload", (event) => {
    if (!sending) return;
    event.preventDefault();
    event.returnValue = "";
  });
  // A file dropped beside the zone would replace the page (and the uploads in progress).
  for (const type of ["dragover", "drop"]) {
    window.addEventListener(type, (event) => {
      if (!zone.contains(event.target)) event.preventDefault();
    });
  }
  // Files picked from here on are taken (a script still loading would miss them).
  zone.dataset.ready = "true";
})();
