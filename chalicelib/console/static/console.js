// The console's one script, and all it does: times in the reader's own zone, the parts of a page that
// change while a campaign sends brought up to date every few seconds, a secret copied at a click, a file of
// recipients uploaded straight to S3 with its progress, and a campaign's time sent with the reader's zone.
// Every page works without it (times then read in UTC, a reload shows the progress, a secret is selected),
// but the upload: a file goes to S3 by a signed form only a script can send (the CLI and API do it without).
"use strict";

const EVERY_MS = 4000;

function localTimes(root) {
  const shown = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
  for (const el of root.querySelectorAll("time[datetime]")) {
    const at = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(at.getTime())) continue;
    el.title = el.getAttribute("datetime");
    el.textContent = shown.format(at);
  }
}

// An element with `data-refresh="<url>"` is replaced by the element of the same id that the URL answers,
// until an answer no longer asks to be refreshed (the campaign is done), or the session ended, or the part
// is gone. The page then goes quiet: each other part refreshes once more (to show the end), then stops too.
// A busy or failing server (429, 5xx, offline) is asked again later and later, up to a minute apart. The
// refreshes say they are the page's own (`X-Console-Refresh`), so they do not keep an idle session alive.
let quiet = false;
const MOST_MS = 60000;

function keepWhatTheReaderOpened(current, fresh) {
  for (const open of current.querySelectorAll("details[open][id]")) {
    const same = fresh.querySelector(`#${CSS.escape(open.id)}`);
    if (same) same.open = true;
  }
  const focused = document.activeElement;
  return focused && focused.id && current.contains(focused) ? focused.id : null;
}

function follow(el, wait = EVERY_MS) {
  const url = el.dataset.refresh;
  const id = el.id;
  if (!url || !id) return;
  window.setTimeout(async () => {
    if (document.hidden) return follow(el, wait);
    const last = quiet;
    let answer;
    try {
      answer = await fetch(url, {
        credentials: "same-origin",
        headers: { Accept: "text/html", "X-Console-Refresh": "1" },
      });
    } catch {
      return follow(el, Math.min(wait * 2, MOST_MS)); // offline a moment: later
    }
    if (answer.status === 429 || answer.status >= 500) return follow(el, Math.min(wait * 2, MOST_MS));
    if (!answer.ok || answer.redirected) {
      quiet = true; // signed out, or gone: the page says so at the next load
      return;
    }
    const parsed = document.createElement("template");
    parsed.innerHTML = await answer.text();
    const fresh = parsed.content.getElementById(id);
    const current = document.getElementById(id);
    if (!fresh || !current) {
      quiet = true;
      return;
    }
    const focusedId = keepWhatTheReaderOpened(current, fresh);
    current.replaceWith(fresh);
    localTimes(fresh);
    if (focusedId) document.getElementById(focusedId)?.focus({ preventScroll: true });
    if (!fresh.dataset.refresh) {
      quiet = true;
      // A part whose end changes the rest of the page (an upload read: the campaign's form comes next).
      if (fresh.hasAttribute("data-reload-when-done")) window.location.reload();
    } else if (!last) follow(fresh);
  }, wait);
}

// A button `data-copy="<id>"` copies that field's value (a secret shown once) and says so where
// `data-copied-for="<id>"` is. Without the script, or without the clipboard, the field is selectable text.
function copyButtons(root) {
  for (const button of root.querySelectorAll("button[data-copy]")) {
    const field = document.getElementById(button.dataset.copy);
    const said = root.querySelector(`[data-copied-for="${CSS.escape(button.dataset.copy)}"]`);
    if (!field || !navigator.clipboard) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(field.value);
        if (said) said.textContent = "Copied to the clipboard.";
      } catch {
        field.select();
        if (said) said.textContent = "The browser did not allow copying: it is selected, copy it with your keys.";
      }
    });
  }
}

// The upload form (`data-upload`): the console makes the upload and its presigned form, the file goes
// straight to S3 (never through the API, whatever its size) with its progress shown, then the console reads it.
function s3Message(text) {
  const found = /<Message>([^<]*)<\/Message>/.exec(text || "");
  return found ? found[1] : "no reason given";
}

function megabytes(bytes) {
  return `${(bytes / 1048576).toFixed(bytes < 10485760 ? 1 : 0)} MB`;
}

function uploadForms(root) {
  for (const form of root.querySelectorAll("form[data-upload]")) {
    const status = form.querySelector('[role="status"]');
    const bar = form.querySelector("progress");
    const button = form.querySelector('button[type="submit"]');
    const say = (text) => { status.textContent = text; };
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const file = form.elements.file.files[0];
      if (!file) return;
      button.disabled = true;
      const csrf = form.elements.csrf.value;
      const asked = new URLSearchParams({
        csrf,
        filename: file.name.slice(0, 200),
        format: /\.(jsonl|ndjson)$/i.test(file.name) ? "jsonl" : "csv",
      });
      if (form.elements.addressColumn.value.trim()) asked.set("addressColumn", form.elements.addressColumn.value.trim());
      say("Starting the upload…");
      let made;
      try {
        const answer = await fetch(form.action, { method: "POST", credentials: "same-origin", body: asked });
        made = await answer.json();
        if (!answer.ok) throw new Error(made.detail || `the console answered ${answer.status}`);
      } catch (error) {
        say(`Not uploaded: ${error.message}`);
        button.disabled = false;
        return;
      }
      const data = new FormData();
      for (const [name, value] of Object.entries(made.form.fields)) data.append(name, value);
      data.append("file", file);
      bar.parentElement.hidden = false;
      const xhr = new XMLHttpRequest();
      xhr.open("POST", made.form.url);
      xhr.upload.addEventListener("progress", (e) => {
        if (!e.lengthComputable) return;
        bar.value = Math.floor((e.loaded / e.total) * 100);
        bar.textContent = `${bar.value}%`;
        say(`Uploaded ${megabytes(e.loaded)} of ${megabytes(e.total)}`);
      });
      xhr.addEventListener("error", () => {
        say("The file did not reach S3 (the connection failed): try again.");
        button.disabled = false;
      });
      xhr.addEventListener("load", async () => {
        if (xhr.status >= 300) {
          say(`S3 refused the file: ${s3Message(xhr.responseText)}`);
          button.disabled = false;
          return;
        }
        bar.value = 100;
        say("Uploaded. Reading it…");
        await fetch(`${made.page}/read`, { method: "POST", credentials: "same-origin", body: new URLSearchParams({ csrf }) });
        window.location.assign(made.page);
      });
      xhr.send(data);
    });
  }
}

// A campaign's time (`datetime-local`) is sent with the reader's offset from UTC at that time (`data-timezone-offset`).
function timeZones(root) {
  for (const form of root.querySelectorAll("form")) {
    const offset = form.querySelector("[data-timezone-offset]");
    const at = form.elements.at;
    if (!offset || !at) continue;
    form.addEventListener("submit", () => {
      const when = at.value ? new Date(at.value) : new Date();
      offset.value = String(-when.getTimezoneOffset());
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  copyButtons(document);
  uploadForms(document);
  timeZones(document);
  for (const el of document.querySelectorAll("[data-refresh]")) follow(el);
});
