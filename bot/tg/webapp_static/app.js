// The Mini App: one card's details, read with the user's initData, and its decisions.
// Everything shown is set as text (never as HTML): the agent wrote it.
"use strict";

const tg = window.Telegram ? window.Telegram.WebApp : null;
const base = document.querySelector('meta[name="skald-base"]').content;
const root = document.getElementById("card");

function launchData() {
  if (tg && tg.initData) return tg.initData;
  return new URLSearchParams(location.hash.slice(1)).get("tgWebAppData") || "";
}

function cardRef(initData) {
  return new URLSearchParams(initData).get("start_param")
    || new URLSearchParams(location.search).get("ref") || "";
}

const initData = launchData();
const ref = cardRef(initData);
const api = `${base}/api/card/${encodeURIComponent(ref)}`;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
  }
  return node;
}

async function call(path, method, body) {
  const response = await fetch(api + path, {
    method,
    headers: { "Authorization": `tma ${initData}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = {};
  try { data = await response.json(); } catch (_) { /* an empty or non-JSON answer */ }
  return { status: response.status, data };
}

// Telegram.WebApp.close(), or the same request to the page around this one without it.
function close() {
  if (tg) tg.close();
  else if (window.parent !== window) {
    window.parent.postMessage(JSON.stringify({ eventType: "web_app_close", eventData: {} }), "*");
  }
}

// Light or dark as the Telegram app is (the system's setting without it), kept current.
function followScheme() {
  const dark = tg && tg.colorScheme ? tg.colorScheme === "dark"
    : window.matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.dataset.scheme = dark ? "dark" : "light";
}

function message(text) {
  root.replaceChildren(el("p", { class: "muted", id: "message" }, text));
}

const OUTDATED = "This card was edited since you saw it: look at it again; nothing was sent.";

// The card as it is now, with a notice above it (after a refusal, or an edit saved).
async function reload(notice) {
  const { status, data } = await call("", "GET");
  if (status !== 200) { message(`${notice} ${data.error || status}`); return; }
  show(data, notice);
}

// --- values --------------------------------------------------------------------------

function jsonTree(value, key) {
  const label = key === undefined ? null : el("span", { class: "key" }, `${key}: `);
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
    const brackets = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
    const node = el("details", { class: "json", open: "" },
      el("summary", {}, label, `${brackets[0]}${entries.length}${brackets[1]}`));
    for (const [k, v] of entries) node.append(el("div", { class: "json-item" }, jsonTree(v, k)));
    return node;
  }
  const kind = value === null ? "null" : typeof value;
  return el("div", { class: "json-leaf" }, label,
    el("span", { class: `json-${kind}` }, JSON.stringify(value)));
}

function diffFiles(text) {
  const files = [];
  let file = null;
  for (const line of text.split("\n")) {
    if (line.startsWith("diff --git ") || (line.startsWith("--- ") && (!file || file.started))) {
      file = { name: line, lines: [], started: false };
      files.push(file);
    }
    if (!file) { file = { name: "", lines: [], started: false }; files.push(file); }
    if (line.startsWith("+++ ")) file.name = line.slice(4).replace(/^b\//, "");
    if (line.startsWith("@@")) file.started = true;
    file.lines.push(line);
  }
  return files;
}

// A diff line's text: its +, - or space, then its code coloured by the file's language.
function codeCell(line, kind, language) {
  if (kind === "hunk" || kind === "head" || !language) return el("td", { class: "code" }, line);
  return el("td", { class: "code" }, line.slice(0, 1), ...highlighted(line.slice(1), language));
}

function diffView(text) {
  const wrap = el("div", { class: "diff" });
  for (const file of diffFiles(text)) {
    const language = languageOf(file.name);
    const table = el("table", { class: "diff-lines" });
    let oldNo = 0, newNo = 0;
    for (const line of file.lines) {
      const hunk = /^@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(line);
      let left = "", right = "", kind = "ctx";
      if (hunk) { oldNo = +hunk[1]; newNo = +hunk[2]; kind = "hunk"; }
      else if (line.startsWith("+++ ") || line.startsWith("--- ") || line.startsWith("diff ")) kind = "head";
      else if (line.startsWith("+")) { right = newNo ? newNo++ : ""; kind = "add"; }
      else if (line.startsWith("-")) { left = oldNo ? oldNo++ : ""; kind = "del"; }
      else { left = oldNo ? oldNo++ : ""; right = newNo ? newNo++ : ""; }
      table.append(el("tr", { class: `diff-${kind}` },
        el("td", { class: "no" }, String(left)), el("td", { class: "no" }, String(right)),
        codeCell(line, kind, language)));
    }
    wrap.append(el("details", { class: "diff-file", open: "", "data-language": language },
      el("summary", {}, file.name || "changes", ` (${file.lines.length} lines)`), table));
  }
  return wrap;
}

function valueView(block) {
  if (block.value_type === "diff" && typeof block.value === "string") return diffView(block.value);
  if (block.value !== null && typeof block.value === "object") return jsonTree(block.value);
  const text = typeof block.value === "string" ? block.value : JSON.stringify(block.value);
  return el("pre", { class: `value value-${block.value_type}` }, text);
}

// --- the card --------------------------------------------------------------------------

let countdownTimer = null; // one timer, however often the card is drawn again

function countdown(expiresAt) {
  const node = el("span", { class: "expiry" });
  const end = Date.parse(expiresAt);
  const tick = () => {
    const left = Math.max(0, Math.round((end - Date.now()) / 1000));
    node.textContent = left > 0
      ? `expires in ${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}`
      : "expired";
  };
  tick();
  clearInterval(countdownTimer);
  countdownTimer = setInterval(tick, 1000);
  return node;
}

function header(card) {
  const title = card.kind === "clarification" ? card.question
    : card.edit ? `Edited by ${card.edit.by}` : card.summary;
  const votes = card.votes.map((v) => v.name).join(", ");
  return el("header", {},
    el("div", { class: "muted" }, `${card.agent || "agent"} · ${card.id}`),
    el("h1", { id: "title" }, title),
    card.tool ? el("div", { class: "tool" }, card.tool) : null,
    el("div", { class: "meta" },
      el("span", { id: "state", class: `state-${card.state}` }, card.state),
      card.expires_at ? countdown(card.expires_at) : null,
      card.kind === "approval"
        ? el("span", { id: "votes" }, `${card.votes.length} of ${card.required} approvals`
          + (votes ? `: ${votes}` : ""))
        : null));
}

function actions(card) {
  if (!card.approver || card.state !== "open") return null;
  const bar = el("div", { class: "actions", id: "actions" });
  const decide = async (body) => {
    for (const button of bar.querySelectorAll("button")) button.disabled = true;
    const { status, data } = await call("/decide", "POST", body);
    if (status === 200) {
      message(`Sent: ${data.outcome} (${data.state}).`);
      close();
      return;
    }
    if (data.outcome === "refused:outdated") { await reload(OUTDATED); return; }
    message(`Not sent: ${data.outcome || data.error || status}.`);
  };
  if (card.kind === "clarification") {
    card.options.forEach((option, index) => bar.append(
      el("button", { onclick: () => decide({ action: "answer", option: index }) }, option)));
    const answer = el("textarea", { id: "answer", placeholder: "Your answer" });
    bar.append(answer, el("button", {
      onclick: () => answer.value.trim() && decide({ action: "answer", text: answer.value }),
    }, "Send answer"));
    return bar;
  }
  const reason = el("textarea", { id: "reason", placeholder: "Reason for denying" });
  // An edited card is approved as the revision shown, as "Approve edited" in the chat.
  const approve = card.revision
    ? { action: "approve_edited", revision: card.revision } : { action: "approve" };
  bar.append(
    el("button", { id: "approve", class: "approve", onclick: () => decide(approve) },
      card.revision ? "✅ Approve edited" : "✅ Approve"),
    el("button", { id: "deny", class: "deny", onclick: () => decide({ action: "deny" }) },
      "❌ Deny"),
    reason,
    el("button", {
      id: "deny-reason",
      onclick: () => reason.value.trim() && decide({ action: "deny_with_reason", text: reason.value }),
    }, "✍️ Deny with reason"));
  return bar;
}

// A text area per value the card offers to edit, each saved on its own as the new value
// (as a reply to the chat's edit prompt), bound to the revision shown.
function editor(card) {
  if (!card.approver || card.state !== "open" || !(card.editable || []).length) return null;
  const section = el("section", { class: "block", id: "edit" }, el("h2", {}, "✏️ Edit"));
  for (const key of card.editable) {
    const area = el("textarea", { class: "edit-value", "data-key": key, spellcheck: "false" });
    area.value = card.edit_values[key];
    const problem = el("p", { class: "problem", "data-key": key });
    const save = el("button", {
      class: "save-edit", "data-key": key,
      onclick: async () => {
        save.disabled = true;
        const { status, data } = await call("/edit", "POST",
          { key, text: area.value, revision: card.revision });
        save.disabled = false;
        if (status === 200) show(data, `Edit saved: ${key} is changed. Approve the edited version to run it.`);
        else if (data.outcome === "refused:outdated") await reload(OUTDATED);
        else problem.textContent = `Not saved: ${data.error || data.outcome || status}.`;
      },
    }, "Save edit");
    section.append(el("label", { class: "key" }, key), area, problem, save);
  }
  return section;
}

function editShown(card) {
  if (!card.edit) return [];
  return card.edit.changes.map((change) => el("section", { class: "block edited" },
    el("h2", {}, `${change.key} (edited by ${card.edit.by})`),
    valueView({ value_type: "diff", value: change.diff })));
}

function show(card, notice) {
  const parts = [header(card)];
  if (notice) parts.push(el("p", { class: "notice", id: "notice" }, notice));
  if (card.masked && card.revealable) {
    parts.push(el("button", {
      id: "reveal",
      onclick: async () => {
        const { status, data } = await call("/reveal", "POST");
        if (status === 200) show(data); else message(`Not revealed: ${data.error || status}.`);
      },
    }, "👁 Reveal secrets"));
  }
  for (const block of card.blocks || []) {
    parts.push(el("section", { class: "block" },
      el("h2", {}, block.label || block.type), valueView(block)));
  }
  parts.push(...editShown(card));
  if (card.kind === "approval") {
    parts.push(el("section", { class: "block", id: "arguments" },
      el("h2", {}, card.edit ? "Arguments as they will run" : "Arguments"),
      jsonTree(card.arguments)));
  }
  parts.push(editor(card), actions(card));
  root.replaceChildren(...parts.filter(Boolean));
}

async function start() {
  followScheme();
  if (tg) { tg.onEvent("themeChanged", followScheme); tg.ready(); tg.expand(); }
  else window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", followScheme);
  if (!initData || !ref) { message("Open this page from a card's Details button."); return; }
  const { status, data } = await call("", "GET");
  if (status !== 200) { message(`Cannot show this card: ${data.error || status}.`); return; }
  show(data);
}

start();
