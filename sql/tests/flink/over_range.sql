-- OVER with a RANGE frame: orders of the same product in the 10 seconds up to each.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, n BIGINT, least INT) WITH (${SINK});
INSERT INTO result
SELECT order_id, COUNT(*) OVER (PARTITION BY product ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW), MIN(qty) OVER (PARTITION BY product ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW) FROM orders;
