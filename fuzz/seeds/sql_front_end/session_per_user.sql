-- SESSION windows per user: a session closes after 3 s without an order
-- from that user (orders with amount > 700 only, so gaps occur).
CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount BIGINT,
  tag STRING,
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
  'fields.amount.max' = '1000',
  'fields.tag.length' = '6'
);
CREATE TABLE result (
  user_id INT,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  orders BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result
SELECT user_id, window_start, window_end, COUNT(*), SUM(amount)
FROM TABLE(SESSION(TABLE orders PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '3' SECOND))
WHERE amount > 700
GROUP BY user_id, window_start, window_end;
