-- OVER from the partition's start: running count, sum and average per user.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, n BIGINT, q INT, a INT) WITH (${SINK});
INSERT INTO result
SELECT order_id, COUNT(*) OVER w, SUM(qty) OVER w, AVG(qty) OVER w FROM orders WINDOW w AS (PARTITION BY user_id ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW);
