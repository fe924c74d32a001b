BEGIN TRANSACTION;
CREATE TABLE contacts (
    recipient TEXT NOT NULL,
    sender TEXT NOT NULL,
    PRIMARY KEY (recipient, sender)
) WITHOUT ROWID;
CREATE TABLE queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recipient TEXT NOT NULL,
    sender TEXT NOT NULL,
    address TEXT NOT NULL,
    envelope_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    queued_ms INTEGER NOT NULL,
    body TEXT NOT NULL
);
INSERT INTO "queue" VALUES(1,'alice','carol','10.0.0.1','e1',11,1,'{"id":"e1"}');
CREATE TABLE recipients (
    id TEXT PRIMARY KEY,
    first_ms INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO "recipients" VALUES('alice',1);
CREATE INDEX queue_by_recipient ON queue (recipient, seq, size);
CREATE UNIQUE INDEX queue_by_envelope ON queue (recipient, envelope_id, sender);
CREATE INDEX queue_by_age ON queue (queued_ms);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('queue',1);
COMMIT;
PRAGMA user_version = 4;
