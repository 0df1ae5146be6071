-- error: fields.ts.start = '2026-01-01 00:00:00.12é' is not a timestamp
-- A multi-byte character in the fraction once panicked the planner.
CREATE TABLE t (ts TIMESTAMP(3)) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '10',
  'fields.ts.start' = '2026-01-01 00:00:00.12é'
);
CREATE TABLE result (ts TIMESTAMP(3)) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result SELECT ts FROM t;
