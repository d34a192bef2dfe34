-- The flight recorder (DESIGN §12): each run's recording setting, its journal (one entry per
-- boundary, `seq` contiguous from 1 per run, an entry id written once), artifacts by SHA-256.
ALTER TABLE runs ADD COLUMN record boolean NOT NULL DEFAULT false;
CREATE TABLE journal (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    id text NOT NULL,
    session_id text NOT NULL,
    step integer NOT NULL,
    attempt_id text,
    ts double precision NOT NULL,
    execution_key text,
    kind text NOT NULL,
    payload text NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, id)
);
CREATE TABLE artifacts (
    sha256 text PRIMARY KEY,
    media_type text NOT NULL,
    name text,
    data bytea NOT NULL
);
