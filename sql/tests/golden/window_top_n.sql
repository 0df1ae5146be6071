-- Window Top-N: per 10-second window, the two users with the largest
-- totals, ranked; final per window, so it goes into an append-only file
-- sink (Flink plans it append-only too). Values are computed from the
-- order id, so Flink 2.3 gives these very rows.
CREATE TABLE orders (
  order_id BIGINT,
  user_id AS CAST(order_id % 5 AS INT),
  amount AS (order_id * 7919) % 1009,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '4000',
  'rows-per-second' = '1500',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '3999'
);
CREATE TABLE result (first_order BIGINT, user_id INT, total BIGINT, rn BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT first_order, user_id, total, rn FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY total DESC) AS rn
  FROM (
    SELECT window_start, window_end, user_id, MIN(order_id) AS first_order, SUM(amount) AS total
    FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND))
    GROUP BY window_start, window_end, user_id))
WHERE rn <= 2;
