// The console's one script, and all it does: times in the reader's own zone, and the parts of a page that
// change while a campaign sends brought up to date every few seconds. Every page works without it (times
// then read in UTC, and a reload shows the progress).
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
// until an answer no longer asks to be refreshed (the campaign is done) or the session ended. The page then
// goes quiet: each other part refreshes once more (to show the end), then stops too.
let quiet = false;

function follow(el) {
  const url = el.dataset.refresh;
  const id = el.id;
  if (!url || !id) return;
  window.setTimeout(async () => {
    if (document.hidden) return follow(el);
    const last = quiet;
    let answer;
    try {
      answer = await fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } });
    } catch {
      return follow(el); // offline a moment: try again
    }
    if (!answer.ok || answer.redirected) return; // signed out, or gone: the page says so at the next load
    const parsed = document.createElement("template");
    parsed.innerHTML = await answer.text();
    const fresh = parsed.content.getElementById(id);
    const current = document.getElementById(id);
    if (!fresh || !current) return;
    current.replaceWith(fresh);
    localTimes(fresh);
    if (!fresh.dataset.refresh) quiet = true;
    else if (!last) follow(fresh);
  }, EVERY_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  for (const el of document.querySelectorAll("[data-refresh]")) follow(el);
});
