-- Batch mode: the same kind of GROUP BY gives the final table directly
-- (one row per key, no changelog), into an append-only sink; plus a global
-- aggregate and COUNT(DISTINCT).
SET 'execution.runtime-mode' = 'batch';
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
CREATE TABLE per_user (user_id INT, orders BIGINT, total BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out/per_user', 'format' = 'csv');
CREATE TABLE overall (orders BIGINT, users BIGINT, largest BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out/overall', 'format' = 'csv');
INSERT INTO per_user SELECT user_id, COUNT(*), SUM(amount) FROM orders GROUP BY user_id;
INSERT INTO overall SELECT COUNT(*), COUNT(DISTINCT user_id), MAX(amount) FROM orders;
