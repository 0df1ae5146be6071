-- OVER with a ROWS frame: each order with the sum and max of its user's last three.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, user_id INT, s DECIMAL(38, 2), m INT) WITH (${SINK});
INSERT INTO result
SELECT order_id, user_id, SUM(amount) OVER w, MAX(qty) OVER w FROM orders WINDOW w AS (PARTITION BY user_id ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW);
