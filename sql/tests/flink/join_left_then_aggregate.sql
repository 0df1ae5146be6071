-- An aggregate over a LEFT JOIN (retractions of padded rows).
-- updating
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE users (user_id INT, name STRING, city STRING, level INT)
  WITH ('connector' = 'filesystem', 'path' = '${DATA}/users.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (city STRING, n BIGINT) WITH (${SINK});
INSERT INTO result
SELECT COALESCE(u.city, '?'), COUNT(*) FROM orders o LEFT JOIN users u ON o.user_id = u.user_id GROUP BY COALESCE(u.city, '?');
