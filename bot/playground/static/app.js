// The playground's chat view: renders the stand-in's messages from their text and entities,
// as a Telegram client does, and acts as the chosen person (messages, replies, button taps).
"use strict";

const state = {
  world: null,
  messages: new Map(),   // chat id -> Map(message id -> message)
  me: null,              // the user id the page acts as
  chat: null,            // the chat id shown
  replyTo: null,         // the message id the next message replies to
};
const hiddenSpoilers = new WeakMap();
const $ = (id) => document.getElementById(id);

// --- entities -----------------------------------------------------------------------------

function renderText(text, entities) {
  const root = document.createElement("div");
  root.className = "text";
  const sorted = [...(entities || [])].sort((a, b) => a.offset - b.offset || b.length - a.length);
  build(root, text, 0, text.length, sorted);
  return root;
}

function build(parent, text, start, end, entities) {
  let pos = start;
  let i = 0;
  while (i < entities.length) {
    const entity = entities[i];
    const from = Math.max(entity.offset, pos);
    const to = Math.min(entity.offset + entity.length, end);
    if (from > pos) parent.appendChild(document.createTextNode(text.slice(pos, from)));
    const inner = [];
    let j = i + 1;
    while (j < entities.length && entities[j].offset < to) {
      const e = entities[j];
      inner.push({ ...e, length: Math.min(e.offset + e.length, to) - e.offset });
      j += 1;
    }
    if (to > from) {
      const [outer, content] = element(entity, text.slice(from, to));
      build(content, text, from, to, inner);
      parent.appendChild(outer);
      if (entity.type === "spoiler") hide(outer, content);
    }
    pos = Math.max(pos, to);
    i = j;
  }
  if (pos < end) parent.appendChild(document.createTextNode(text.slice(pos, end)));
}

function element(entity, covered) {
  const make = (tag, cls) => {
    const el = document.createElement(tag);
    if (cls) el.className = cls;
    return el;
  };
  switch (entity.type) {
    case "bold": { const el = make("b"); return [el, el]; }
    case "italic": { const el = make("i"); return [el, el]; }
    case "underline": { const el = make("u"); return [el, el]; }
    case "strikethrough": { const el = make("s"); return [el, el]; }
    case "code": { const el = make("code", "inline"); return [el, el]; }
    case "pre": {
      const pre = make("pre");
      if (entity.language) {
        const label = make("span", "lang");
        label.textContent = entity.language;
        pre.appendChild(label);
      }
      const code = make("code");
      if (entity.language) code.dataset.language = entity.language;
      pre.appendChild(code);
      return [pre, code];
    }
    case "blockquote": { const el = make("blockquote"); return [el, el]; }
    case "expandable_blockquote": {
      const el = make("blockquote", "expandable collapsed");
      el.title = "Show more";
      el.addEventListener("click", () => el.classList.toggle("collapsed"));
      return [el, el];
    }
    case "spoiler": { const el = make("span", "spoiler"); return [el, make("span", "revealed")]; }
    case "text_link": return link(make, entity.url, covered);
    case "url": return link(make, /^[a-z][a-z0-9+.-]*:/i.test(covered) ? covered : `http://${covered}`);
    case "email": return link(make, `mailto:${covered}`);
    case "phone_number": return link(make, `tel:${covered}`);
    case "text_mention": { const el = make("span", "mention"); return [el, el]; }
    case "mention": case "hashtag": case "cashtag": {
      const el = make("span", "mention"); return [el, el];
    }
    case "bot_command": {
      const el = make("span", "command");
      el.addEventListener("click", (event) => { event.stopPropagation(); send(covered); });
      return [el, el];
    }
    case "custom_emoji": { const el = make("span", "custom-emoji"); return [el, el]; }
    case "date_time": { const el = make("time"); return [el, el]; }
    default: { const el = make("span"); return [el, el]; }
  }
}

function link(make, url) {
  const a = make("a");
  a.href = url;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  return [a, a];
}

// A spoiler's text stays out of the page until it is clicked: the element shows a blurred
// placeholder and keeps the content aside.
function hide(spoiler, content) {
  hiddenSpoilers.set(spoiler, content);
  const width = Math.max(2, Math.min(content.textContent.length, 48));
  spoiler.style.width = `${width}ch`;
  spoiler.setAttribute("role", "button");
  spoiler.setAttribute("aria-label", "Spoiler: click to reveal");
  spoiler.tabIndex = 0;
  spoiler.addEventListener("click", (event) => { event.stopPropagation(); reveal(spoiler); });
  spoiler.addEventListener("keydown", (event) => { if (event.key === "Enter") reveal(spoiler); });
}

function reveal(spoiler) {
  const content = hiddenSpoilers.get(spoiler);
  if (content) spoiler.replaceWith(content);
}

// --- messages -----------------------------------------------------------------------------

function userName(id) {
  if (state.world && id === state.world.bot.id) return state.world.bot.first_name;
  const user = state.world && state.world.users.find((u) => u.id === id);
  if (!user) return String(id);
  return [user.first_name, user.last_name].filter(Boolean).join(" ");
}

function renderMessage(message) {
  const outgoing = message.from && message.from.id === state.me;
  const row = document.createElement("div");
  row.className = `message ${outgoing ? "out" : "in"}`;
  row.dataset.messageId = message.message_id;
  const bubble = document.createElement("div");
  bubble.className = "bubble";
  row.appendChild(bubble);
  const chat = currentChat();
  if (chat && chat.type !== "private" && !outgoing) {
    const sender = document.createElement("div");
    sender.className = "sender";
    sender.textContent = userName(message.from.id);
    bubble.appendChild(sender);
  }
  if (message.reply_to_message) {
    const quote = document.createElement("div");
    quote.className = "reply-quote";
    const replied = message.reply_to_message;
    quote.textContent = `${userName(replied.from.id)}: ${(replied.text || replied.caption || "").slice(0, 80)}`;
    bubble.appendChild(quote);
  }
  if (message.document) {
    const doc = document.createElement("a");
    doc.className = "document";
    doc.href = `/playground/files/${encodeURIComponent(message.document.file_id)}`;
    doc.download = message.document.file_name;
    doc.textContent = `📄 ${message.document.file_name} · ${formatSize(message.document.file_size)}`;
    bubble.appendChild(doc);
  }
  const text = message.text ?? message.caption;
  if (text) bubble.appendChild(renderText(text, message.entities || message.caption_entities));
  const meta = document.createElement("div");
  meta.className = "meta";
  const when = new Date(message.date * 1000).toTimeString().slice(0, 5);
  meta.textContent = message.edit_date ? `edited ${when}` : when;
  const reply = document.createElement("button");
  reply.type = "button";
  reply.className = "reply-button";
  reply.title = "Reply";
  reply.textContent = "↩";
  reply.addEventListener("click", () => setReplyTo(message));
  meta.prepend(reply);
  bubble.appendChild(meta);
  const keyboard = message.reply_markup && message.reply_markup.inline_keyboard;
  if (keyboard) row.appendChild(renderKeyboard(message, keyboard));
  return row;
}

function renderKeyboard(message, rows) {
  const box = document.createElement("div");
  box.className = "keyboard";
  for (const buttons of rows) {
    const line = document.createElement("div");
    line.className = "keyboard-row";
    for (const button of buttons) line.appendChild(renderButton(message, button));
    box.appendChild(line);
  }
  return box;
}

function renderButton(message, button) {
  const el = document.createElement("button");
  el.type = "button";
  el.className = `inline-button ${button.style || ""}`.trim();
  el.textContent = button.text;
  if (button.web_app) {
    el.classList.add("web-app");
    el.addEventListener("click", () => openMiniApp(message, button.web_app.url));
  } else if (button.url && button.url.startsWith("https://t.me/")) {
    el.classList.add("url");
    el.addEventListener("click", () => openMiniApp(message, button.url, true));
  } else if (button.url) {
    el.classList.add("url");
    el.addEventListener("click", () => window.open(button.url, "_blank", "noopener"));
  } else if (button.copy_text) {
    el.classList.add("copy");
    el.addEventListener("click", async () => {
      try { await navigator.clipboard.writeText(button.copy_text.text); } catch (e) { /* no clipboard */ }
      toast("Copied to clipboard");
    });
  } else if (button.callback_data !== undefined) {
    el.addEventListener("click", () => tap(message, button.callback_data, el));
  }
  return el;
}

function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  return `${(bytes / 1024).toFixed(1)} KB`;
}

function upsert(message) {
  const chatId = message.chat.id;
  if (!state.messages.has(chatId)) state.messages.set(chatId, new Map());
  const chatMessages = state.messages.get(chatId);
  const isNew = !chatMessages.has(message.message_id);
  chatMessages.set(message.message_id, message);
  if (chatId !== state.chat) return;
  // A reply to the message the bar replies to (replayed after a reload) settles it.
  const answered = message.reply_to_message && message.reply_to_message.message_id;
  if (answered && answered === state.replyTo && message.from.id !== state.world.bot.id) {
    clearReply();
  }
  const box = $("messages");
  const old = box.querySelector(`[data-message-id="${message.message_id}"]`);
  if (message.deleted) {
    if (old) old.remove();
    return;
  }
  const row = renderMessage(message);
  if (old) {
    old.replaceWith(row);
  } else {
    const later = [...box.children].find((el) => Number(el.dataset.messageId) > message.message_id);
    box.insertBefore(row, later || null);
    if (!later) box.scrollTop = box.scrollHeight;
  }
  if (isNew && message.force_reply && message.from.id === state.world.bot.id) {
    setReplyTo(message);
  }
}

// --- people and chats ---------------------------------------------------------------------

function currentChat() {
  return state.world && state.world.chats.find((c) => c.id === state.chat);
}

function visibleChats() {
  return state.world.chats.filter((c) => c.members.includes(state.me));
}

function chatTitle(chat) {
  return chat.type === "private" ? state.world.bot.first_name : chat.title;
}

function renderWorld() {
  const who = $("who");
  const chosen = state.me;
  who.replaceChildren(...state.world.users.map((u) => {
    const option = document.createElement("option");
    option.value = u.id;
    option.textContent = userName(u.id);
    return option;
  }));
  if (chosen === null && state.world.users.length) state.me = state.world.users[0].id;
  who.value = String(state.me);
  const chats = visibleChats();
  if (!chats.some((c) => c.id === state.chat)) state.chat = chats.length ? chats[0].id : null;
  $("chats").replaceChildren(...chats.map((chat) => {
    const item = document.createElement("button");
    item.type = "button";
    item.className = `chat-item${chat.id === state.chat ? " active" : ""}`;
    item.dataset.chatId = chat.id;
    item.textContent = chatTitle(chat);
    item.addEventListener("click", () => { state.chat = chat.id; showChat(); });
    return item;
  }));
  showChat();
}

function showChat() {
  for (const item of $("chats").children) {
    item.classList.toggle("active", Number(item.dataset.chatId) === state.chat);
  }
  const chat = currentChat();
  $("chat-title").textContent = chat ? chatTitle(chat) : "";
  const roles = (chat && state.world.roles[String(chat.id)]) || {};
  $("chat-members").textContent = chat && chat.type !== "private"
    ? chat.members.map((id) => roles[String(id)] ? `${userName(id)} (${roles[String(id)]})` : userName(id)).join(", ")
    : `bot · private chat with ${userName(state.me)}`;
  const box = $("messages");
  box.replaceChildren();
  clearReply();
  const messages = state.messages.get(state.chat);
  if (messages) {
    const ordered = [...messages.values()].sort((a, b) => a.message_id - b.message_id);
    for (const message of ordered) if (!message.deleted) box.appendChild(renderMessage(message));
  }
  box.scrollTop = box.scrollHeight;
}

// --- acting -------------------------------------------------------------------------------

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!answer.ok) throw new Error(answer.description || "failed");
  return answer.result;
}

async function send(text) {
  if (!text.trim() || state.chat === null) return false;
  try {
    await post("/playground/send", {
      chat_id: state.chat, user_id: state.me, text, reply_to: state.replyTo,
    });
  } catch (error) {
    toast(error.message);
    return false;
  }
  clearReply();
  return true;
}

// A Mini App opens in the panel beside the chat, with initData the playground signs with
// its bot token for the person chosen in "You are", as Telegram would.
async function openMiniApp(message, link, orElseOpen) {
  try {
    const src = await post("/playground/webapp", {
      chat_id: message.chat.id, user_id: state.me, link,
    });
    $("miniapp-frame").src = src;
    $("miniapp").hidden = false;
  } catch (error) {
    if (orElseOpen) window.open(link, "_blank", "noopener");
    else toast(error.message);
  }
}

function closeMiniApp() {
  $("miniapp").hidden = true;
  $("miniapp-frame").src = "about:blank";
}

window.addEventListener("message", (event) => {
  if (event.source !== $("miniapp-frame").contentWindow) return;
  try {
    if (JSON.parse(event.data).eventType === "web_app_close") closeMiniApp();
  } catch (_) { /* not a Mini App event */ }
});

async function tap(message, data, button) {
  button.classList.add("pending");
  try {
    const answer = await post("/playground/tap", {
      chat_id: message.chat.id, message_id: message.message_id, user_id: state.me, data,
    });
    if (answer.text && answer.show_alert) showAlert(answer.text);
    else if (answer.text) toast(answer.text);
  } catch (error) {
    toast(error.message);
  } finally {
    button.classList.remove("pending");
  }
}

function setReplyTo(message) {
  state.replyTo = message.message_id;
  $("replying-name").textContent = userName(message.from.id);
  $("replying-text").textContent = (message.text || message.caption || "").slice(0, 80);
  $("replying").hidden = false;
  const placeholder = message.force_reply && message.force_reply.input_field_placeholder;
  $("input").placeholder = placeholder || "Message";
  $("input").focus();
}

function clearReply() {
  state.replyTo = null;
  $("replying").hidden = true;
  $("input").placeholder = "Message";
}

// Pairing an own agent host: as Ada (an admin) in the private chat, "/pair <link>".
function pairAgent() {
  const admin = state.world.users[0];
  if (admin) state.me = admin.id;
  const own = state.world.chats.find((c) => c.type === "private" && c.members.includes(state.me));
  if (own) state.chat = own.id;
  renderWorld();
  const input = $("input");
  input.value = "/pair ";
  input.focus();
  toast("Paste the link `skald-telegram agent pair` printed, then send");
}

function toast(text) {
  const box = $("toast");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 3500);
}

function showAlert(text) {
  $("alert-text").textContent = text;
  $("alert").hidden = false;
  $("alert-ok").focus();
}

// --- wiring -------------------------------------------------------------------------------

function connect() {
  const events = new EventSource("/playground/events");
  events.addEventListener("world", (event) => {
    state.world = JSON.parse(event.data);
    renderWorld();
  });
  events.addEventListener("message", (event) => upsert(JSON.parse(event.data)));
  events.addEventListener("open", () => document.body.classList.add("live"));
  events.addEventListener("error", () => {
    document.body.classList.remove("live");
    // A restarted feed replays every message: start again from nothing.
    state.messages.clear();
  });
}

function wire() {
  // The key came in the address once and is kept in a cookie since: keep it off the screen.
  if (new URLSearchParams(location.search).has("key")) history.replaceState(null, "", "/");
  $("miniapp-close").addEventListener("click", closeMiniApp);
  $("who").addEventListener("change", () => { state.me = Number($("who").value); renderWorld(); });
  $("composer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("input");
    const text = input.value;
    if (await send(text)) input.value = "";
  });
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    } else if (event.key === "Escape") {
      clearReply();
    }
  });
  $("replying-cancel").addEventListener("click", clearReply);
  $("pair-agent").addEventListener("click", pairAgent);
  $("alert-ok").addEventListener("click", () => { $("alert").hidden = true; });
  connect();
}

wire();
