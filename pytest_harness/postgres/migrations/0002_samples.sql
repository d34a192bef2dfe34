-- Online eval samples (DESIGN §15): one per run and grader, written once.
CREATE TABLE samples (
    seq bigserial PRIMARY KEY,
    run_id text NOT NULL,
    task text NOT NULL,
    grader text NOT NULL,
    score double precision,
    passed boolean NOT NULL,
    detail text,
    error text,
    created_at double precision NOT NULL,
    UNIQUE (run_id, grader)
);
CREATE INDEX samples_created ON samples (created_at, seq);
CREATE INDEX samples_task_grader ON samples (task, grader, created_at);
