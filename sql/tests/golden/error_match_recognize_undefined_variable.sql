-- error: DEFINE C: no such variable in the pattern (A, B)
CREATE TABLE ticks (symbol STRING, price INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE result (symbol STRING, p INT) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT * FROM ticks MATCH_RECOGNIZE (
  PARTITION BY symbol ORDER BY ts
  MEASURES LAST(B.price) AS p
  PATTERN (A B)
  DEFINE C AS C.price > 10
);
