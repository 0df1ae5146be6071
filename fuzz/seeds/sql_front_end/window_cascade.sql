-- A window aggregation over another's results: window_time is the
-- rowtime of the inner results (a view), re-windowed by the outer TUMBLE.
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
CREATE VIEW per_user_10s AS
SELECT user_id, window_start AS start_10s, window_time AS rowtime, COUNT(*) AS orders, SUM(amount) AS total
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY user_id, window_start, window_end, window_time;
CREATE TABLE result (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  busiest_10s BIGINT,
  orders BIGINT,
  total BIGINT
) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result
SELECT window_start, window_end, MAX(orders), SUM(orders), SUM(total)
FROM TABLE(TUMBLE(TABLE per_user_10s, DESCRIPTOR(rowtime), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
