// The console's one script, and all it does: times in the reader's own zone, the parts of a page that
// change while a campaign sends brought up to date every few seconds, and a secret copied at a click.
// Every page works without it (times then read in UTC, a reload shows the progress, a secret is selected).
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
    if (!fresh.dataset.refresh) quiet = true;
    else if (!last) follow(fresh);
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

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  copyButtons(document);
  for (const el of document.querySelectorAll("[data-refresh]")) follow(el);
});
