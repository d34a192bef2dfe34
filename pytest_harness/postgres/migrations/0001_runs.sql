-- Runs, their events and their approval requests. JSON payloads are kept as the exact text
-- the store encoded (`text`, not `jsonb`, so numbers and key order come back as written).
CREATE TABLE runs (
    seq bigserial PRIMARY KEY,
    run_id text NOT NULL UNIQUE,
    session_id text NOT NULL,
    task text NOT NULL,
    tenant text,
    tenant_key text NOT NULL,
    principal text NOT NULL,
    input text NOT NULL,
    labels text NOT NULL,
    idempotency_key text,
    status text NOT NULL,
    state text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    lease_owner text,
    lease_token bigint NOT NULL DEFAULT 0,
    lease_expires double precision,
    control text CHECK (control IN ('pause', 'cancel'))
);
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant_key, task, idempotency_key);
CREATE INDEX runs_session ON runs (session_id, seq);
CREATE INDEX runs_status ON runs (status, seq);

-- An event's id is its cursor. Every write that adds events to a run locks the run's row
-- first, so the ids of one run's events become visible in id order.
CREATE TABLE events (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL,
    kind text NOT NULL,
    data text NOT NULL,
    at double precision NOT NULL
);
CREATE INDEX events_run ON events (run_id, id);

CREATE TABLE approvals (
    seq bigserial PRIMARY KEY,
    approval_id text NOT NULL UNIQUE,
    run_id text NOT NULL,
    execution_key text NOT NULL,
    args_digest text NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    rule_id text NOT NULL,
    approvers text NOT NULL,
    requested_by text NOT NULL,
    self_approve boolean NOT NULL,
    requested_at double precision NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approve', 'decline')),
    approver text,
    approver_roles text NOT NULL DEFAULT '[]',
    reason text,
    decided_at double precision
);
CREATE INDEX approvals_run ON approvals (run_id, seq);
