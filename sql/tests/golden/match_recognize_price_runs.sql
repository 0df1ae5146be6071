-- MATCH_RECOGNIZE over a generated ticker: per symbol, a price that rises
-- at least twice and then falls below where the rise started, within ten
-- seconds; matches never overlap (AFTER MATCH SKIP PAST LAST ROW). Rows
-- arrive out of order within the watermark's bound and are matched in time
-- order. The stop-with-savepoint run checkpoints partial matches. The
-- expected rows equal Flink 2.3's (192, checked with PyFlink on the same
-- script).
CREATE TABLE ticks (
  id BIGINT,
  symbol AS CAST(id % 4 AS INT),
  price AS CAST((id * 7919) % 101 AS INT),
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + id * 100 - (id % 5) * 150, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '4000',
  'rows-per-second' = '2000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '0',
  'fields.id.end' = '3999'
);
CREATE TABLE result (symbol INT, start_id BIGINT, top INT, ups BIGINT, bottom INT, avg_up INT, end_ts TIMESTAMP(3))
  WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY symbol
  ORDER BY ts
  MEASURES
    S.id AS start_id,
    LAST(UP.price) AS top,
    COUNT(UP.price) AS ups,
    DOWN.price AS bottom,
    AVG(UP.price) AS avg_up,
    MATCH_ROWTIME() AS end_ts
  ONE ROW PER MATCH
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (S UP{2,} DOWN) WITHIN INTERVAL '10' SECOND
  DEFINE
    UP AS UP.price > COALESCE(LAST(UP.price, 1), S.price),
    DOWN AS DOWN.price < S.price
);
