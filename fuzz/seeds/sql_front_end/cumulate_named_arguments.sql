-- CUMULATE with named arguments: running totals every 15 s within each
-- minute, over all users.
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
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  orders BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result
SELECT window_start, window_end, COUNT(*), SUM(amount)
FROM TABLE(CUMULATE(
  DATA => TABLE orders,
  TIMECOL => DESCRIPTOR(ts),
  STEP => INTERVAL '15' SECOND,
  SIZE => INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
