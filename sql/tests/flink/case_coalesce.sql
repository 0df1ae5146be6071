-- CASE, COALESCE and NULL handling.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, band STRING, uid INT) WITH (${SINK});
INSERT INTO result
SELECT order_id, CASE WHEN amount < 100 THEN 'low' WHEN amount < 500 THEN 'mid' ELSE 'high' END, COALESCE(user_id, -1) FROM orders;
