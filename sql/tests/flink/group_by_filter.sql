-- FILTER (WHERE …) in an unbounded GROUP BY: one condition shared by
-- several aggregates, conditions that are NULL where user_id is, and
-- distinct counts under a filter over INT, TIMESTAMP and STRING values.
-- updating
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (
  qty INT, n BIGINT, big BIGINT, big_users BIGINT, small_users BIGINT, users BIGINT,
  big_total DECIMAL(38, 2), big_most DECIMAL(10, 2), late_times BIGINT, known_min BIGINT, low_products BIGINT
) WITH (${SINK});
INSERT INTO result
SELECT
  qty,
  COUNT(*),
  COUNT(*) FILTER (WHERE amount > 500),
  COUNT(DISTINCT user_id) FILTER (WHERE amount > 500),
  COUNT(DISTINCT user_id) FILTER (WHERE amount <= 500),
  COUNT(DISTINCT user_id),
  SUM(amount) FILTER (WHERE amount > 500),
  MAX(amount) FILTER (WHERE amount > 500),
  COUNT(DISTINCT ts) FILTER (WHERE order_id >= 1500),
  MIN(order_id) FILTER (WHERE user_id > 20),
  COUNT(DISTINCT product) FILTER (WHERE user_id < 10)
FROM orders GROUP BY qty;
