BEGIN TRANSACTION;
CREATE TABLE devices (
        device_id TEXT PRIMARY KEY,
        card_json TEXT NOT NULL,
        platform TEXT,
        paired_at INTEGER NOT NULL
    );
CREATE TABLE grants (
        grant_id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        label TEXT NOT NULL,
        granted_by_json TEXT NOT NULL,
        granted_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        uses INTEGER NOT NULL DEFAULT 0,
        ended_at INTEGER,
        item_id TEXT NOT NULL
    );
CREATE TABLE items (
        item_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        wire_json TEXT NOT NULL,
        args_sha256 TEXT,
        grant_key TEXT,
        grant_label TEXT,
        state TEXT NOT NULL,
        reason TEXT,
        decided_by_json TEXT,
        answer TEXT,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        resolved_at INTEGER
    );
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('rev','5');
CREATE TABLE outbox (
        envelope_id TEXT PRIMARY KEY,
        relay_url TEXT NOT NULL,
        envelope_json TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
INSERT INTO "outbox" VALUES('e1','wss://relay.example','{"id": "e1", "v": 1}',7);
CREATE TABLE pairing_secrets (
        pairing_id TEXT PRIMARY KEY,
        secret TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        used_at INTEGER,
        device_id TEXT
    );
CREATE TABLE received (
        envelope_id TEXT PRIMARY KEY,
        device_id TEXT NOT NULL,
        item_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload_json TEXT NOT NULL,
        verdict TEXT NOT NULL,
        at INTEGER NOT NULL
    );
CREATE TABLE replay (envelope_id TEXT PRIMARY KEY, ts INTEGER NOT NULL);
CREATE INDEX items_state ON items (state, expires_at);
CREATE INDEX items_resolved ON items (resolved_at);
CREATE INDEX replay_ts ON replay (ts);
CREATE INDEX grants_key ON grants (key, expires_at);
COMMIT;
PRAGMA user_version = 2;
