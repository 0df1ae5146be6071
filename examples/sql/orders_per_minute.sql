-- Orders per minute, in Flink SQL: 10 million generated orders (event time
-- advancing 1,000 orders per second, up to 2 s out of order), counted and
-- summed per one-minute tumbling window, printed as each window closes.
--
--   cargo run --release -p weir -- run examples/sql/orders_per_minute.sql

SET 'parallelism.default' = '2';

CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount_cents BIGINT,
  order_time TIMESTAMP(3),
  WATERMARK FOR order_time AS order_time - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '10000000',
  'rows-per-second' = 'unlimited',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '1',
  'fields.order_id.end' = '10000000',
  'fields.user_id.min' = '1',
  'fields.user_id.max' = '100000',
  'fields.amount_cents.min' = '100',
  'fields.amount_cents.max' = '50000',
  'fields.order_time.start' = '2026-01-01 00:00:00',
  'fields.order_time.max-past' = '2 s'
);

CREATE TABLE orders_per_minute (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  orders BIGINT,
  revenue_cents BIGINT,
  buyers BIGINT
) WITH ('connector' = 'print');

INSERT INTO orders_per_minute
SELECT window_start, window_end, COUNT(*), SUM(amount_cents), COUNT(DISTINCT user_id)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(order_time), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
