-- Window deduplication: each user's last order of every 10-second window
-- (ROW_NUMBER() … ORDER BY ts DESC = 1 over the window TVF), final per
-- window, into an append-only file sink, as Flink plans it.
CREATE TABLE orders (
  order_id BIGINT,
  user_id AS CAST(order_id % 3 AS INT),
  amount AS (order_id * 7919) % 1009,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 700, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '2000',
  'rows-per-second' = '1500',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '1999'
);
CREATE TABLE result (user_id INT, order_id BIGINT, amount BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT user_id, order_id, amount FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, user_id ORDER BY ts DESC) AS rn
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND)))
WHERE rn = 1;
