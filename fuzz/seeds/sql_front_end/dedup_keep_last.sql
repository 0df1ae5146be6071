-- Deduplication keeping the last row per key by time: each user's latest
-- order of each size class.
CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount BIGINT,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '6000',
  'rows-per-second' = '3000',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '5999',
  'fields.user_id.min' = '1',
  'fields.user_id.max' = '4',
  'fields.amount.min' = '1',
  'fields.amount.max' = '1000'
);
CREATE TABLE result (user_id INT, big BOOLEAN, order_id BIGINT, amount BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result
SELECT user_id, big, order_id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id, big ORDER BY ts DESC) AS rn
  FROM (SELECT *, amount > 500 AS big FROM orders))
WHERE rn = 1;
