-- Deduplication keeping each user's first order by rowtime (ORDER BY ts
-- ASC = 1): rows arrive out of order (within the watermark's bound), so a
-- user's first arrival is not always its earliest row, and every tenth
-- order goes to a user emitted long before (it must not come out again);
-- each user's earliest row is final once the watermark reaches it, so the
-- result is append-only and goes into a file sink, as in Flink 2.3 (these
-- are its rows).
CREATE TABLE orders (
  order_id BIGINT,
  user_id AS CAST(CASE WHEN order_id % 10 = 9 AND order_id >= 150
    THEN order_id / 15 - 10 ELSE order_id / 15 END AS INT),
  amount AS (order_id * 7919) % 1009,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 100 - (order_id % 7) * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '3000',
  'rows-per-second' = '1500',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '2999'
);
CREATE TABLE result (user_id INT, order_id BIGINT, amount BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT user_id, order_id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY ts ASC) AS rn
  FROM orders)
WHERE rn = 1;
