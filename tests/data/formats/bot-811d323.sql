BEGIN TRANSACTION;
CREATE TABLE activity (
    agent_id TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    summary TEXT NOT NULL,
    grant_id TEXT,
    at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, entry_id)
);
CREATE TABLE agent_state (
    agent_id TEXT PRIMARY KEY,
    last_rev INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    event TEXT NOT NULL,
    chat_id INTEGER,
    agent_id TEXT,
    item_id TEXT,
    user_id INTEGER,
    user_name TEXT,
    detail TEXT NOT NULL DEFAULT '{}'
);
INSERT INTO "audit" VALUES(1,1,'tap',5,NULL,NULL,7,NULL,'{"allowed": false}');
CREATE TABLE bindings (
    agent_id TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    topic_id INTEGER,
    bound_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, chat_id)
);
CREATE TABLE cards (
    card_id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    topic_id INTEGER,
    token TEXT NOT NULL UNIQUE,
    message_id INTEGER,
    dirty INTEGER NOT NULL DEFAULT 1,
    attachment_sent INTEGER NOT NULL DEFAULT 0,
    reminder TEXT NOT NULL DEFAULT 'none',
    posted_at INTEGER,
    UNIQUE (agent_id, item_id, chat_id)
);
CREATE TABLE chat_admins (
    chat_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    fetched_at INTEGER NOT NULL,
    PRIMARY KEY (chat_id, user_id)
);
CREATE TABLE chat_aliases (
    old_id INTEGER PRIMARY KEY,
    new_id INTEGER NOT NULL
);
CREATE TABLE chats (
    chat_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT 'private',
    forbidden INTEGER NOT NULL DEFAULT 0
);
INSERT INTO "chats" VALUES(5,'ops','group',0);
CREATE TABLE decisions (
    decision_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    reason TEXT,
    user_id INTEGER NOT NULL,
    user_name TEXT NOT NULL,
    at INTEGER NOT NULL,
    envelope_id TEXT NOT NULL,
    UNIQUE (agent_id, item_id)
);
CREATE TABLE granted (
    agent_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    label TEXT NOT NULL,
    minutes INTEGER NOT NULL,
    until INTEGER NOT NULL,
    user_name TEXT NOT NULL,
    PRIMARY KEY (agent_id, item_id)
);
CREATE TABLE grants (
    agent_id TEXT NOT NULL,
    grant_id TEXT NOT NULL,
    key TEXT NOT NULL,
    label TEXT NOT NULL,
    granted_by TEXT NOT NULL,
    granted_at INTEGER,
    expires_at INTEGER,
    uses INTEGER NOT NULL DEFAULT 0,
    token TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL DEFAULT 'active',
    revoke_by TEXT,
    revoke_at INTEGER,
    ended_at INTEGER,
    PRIMARY KEY (agent_id, grant_id)
);
CREATE TABLE items (
    agent_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    body_json TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'open',
    outcome_by TEXT,
    outcome_at INTEGER,
    outcome_chat_id INTEGER,
    outcome_reason TEXT,
    expires_at INTEGER,
    remind_at INTEGER,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, item_id)
);
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO "meta" VALUES('schema_version','1');
CREATE TABLE note_lines (
    note_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    agent_id TEXT NOT NULL,
    ref TEXT NOT NULL,
    PRIMARY KEY (note_id, seq)
);
CREATE TABLE notes (
    note_id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    topic_id INTEGER,
    message_id INTEGER,
    opened_at INTEGER NOT NULL,
    dirty INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE outbox (
    envelope_id TEXT PRIMARY KEY,
    relay_url TEXT NOT NULL,
    envelope_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    sent_at INTEGER
);
CREATE TABLE pairing_rejections (
    agent_id TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE TABLE pairings (
    agent_id TEXT PRIMARY KEY,
    relay_url TEXT NOT NULL,
    card_json TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    topic_id INTEGER,
    requested_by INTEGER,
    created_at INTEGER NOT NULL,
    accepted_at INTEGER
);
CREATE TABLE peers (
    agent_id TEXT PRIMARY KEY,
    relay_url TEXT NOT NULL,
    card_json TEXT NOT NULL,
    name TEXT NOT NULL,
    paired_at INTEGER NOT NULL
);
CREATE TABLE prompts (
    chat_id INTEGER NOT NULL,
    message_id INTEGER NOT NULL,
    card_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);
CREATE TABLE replay (
    envelope_id TEXT PRIMARY KEY,
    ts INTEGER NOT NULL,
    seen_at INTEGER NOT NULL
);
CREATE TABLE reported (
    agent_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    outcome_by TEXT,
    outcome_at INTEGER,
    PRIMARY KEY (agent_id, item_id)
);
CREATE TABLE updates (
    update_id INTEGER PRIMARY KEY,
    body TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE users (
    user_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    username TEXT
);
CREATE TABLE votes (
    card_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (card_id, user_id)
);
CREATE INDEX items_open ON items (state, expires_at);
CREATE INDEX items_agent ON items (agent_id, state);
CREATE INDEX items_remind ON items (state, remind_at);
CREATE INDEX cards_dirty ON cards (dirty, chat_id);
CREATE INDEX cards_edits ON cards (chat_id, card_id)
    WHERE dirty > 0 AND message_id IS NOT NULL;
CREATE INDEX outbox_pending ON outbox (relay_url, sent_at);
CREATE INDEX updates_pending ON updates (done, update_id);
CREATE INDEX audit_chat ON audit (chat_id, seq);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE INDEX notes_chat ON notes (chat_id, kind, opened_at);
CREATE INDEX note_lines_ref ON note_lines (agent_id, ref);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('audit',1);
COMMIT;
PRAGMA user_version = 0;
