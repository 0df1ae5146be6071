-- An unbounded GROUP BY: an updating aggregation, written as a changelog
-- (retract mode) that collapses to one row per user and size.
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
CREATE TABLE result (
  user_id INT,
  size STRING,
  orders BIGINT,
  total BIGINT,
  largest BIGINT,
  average BIGINT,
  big_orders BIGINT
) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result
SELECT user_id, CASE WHEN amount > 500 THEN 'big' ELSE 'small' END, COUNT(*), SUM(amount), MAX(amount), AVG(amount),
  COUNT(*) FILTER (WHERE amount > 900)
FROM orders
GROUP BY user_id, CASE WHEN amount > 500 THEN 'big' ELSE 'small' END;
