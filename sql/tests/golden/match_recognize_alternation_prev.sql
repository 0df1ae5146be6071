-- MATCH_RECOGNIZE beyond Flink 2.3, which refuses both alternation
-- ("CEP doesn't support branching patterns") and PREV ("physical offsets
-- within partition"): per symbol, a low price followed by either a jump
-- of more than 60 over the row before it or two rows in a row above 60,
-- then any row. PREV reads the partition's previous row, as the SQL
-- standard has it.
CREATE TABLE ticks (
  id BIGINT,
  symbol AS CAST(id % 3 AS INT),
  price AS CAST((id * id * 7919) % 101 AS INT),
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + id * 100, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '3000',
  'rows-per-second' = '2000',
  'fields.id.kind' = 'sequence',
  'fields.id.start' = '0',
  'fields.id.end' = '2999'
);
CREATE TABLE result (symbol INT, low_id BIGINT, jump_id BIGINT, high_ids BIGINT, last_id BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY symbol
  ORDER BY ts
  MEASURES L.id AS low_id, J.id AS jump_id, COUNT(H.id) AS high_ids, LAST(id) AS last_id
  AFTER MATCH SKIP PAST LAST ROW
  PATTERN (L (J | H H) X)
  DEFINE
    L AS L.price < 30,
    J AS J.price - PREV(J.price) > 60,
    H AS H.price > 60
);
