-- An aggregation of an updating aggregation: how many users have each
-- order count. As counts grow, a user's row is retracted from one bucket
-- and added to the next; an emptied bucket is deleted. Collapsed, the
-- changelog is the final histogram (and an average of the counts).
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
CREATE TABLE result (orders_per_user BIGINT, users BIGINT, avg_amount_sum BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv', 'sink.changelog-mode' = 'retract');
INSERT INTO result
SELECT cnt, COUNT(*), AVG(total)
FROM (SELECT user_id, COUNT(*) AS cnt, SUM(amount) AS total FROM orders GROUP BY user_id)
GROUP BY cnt;
