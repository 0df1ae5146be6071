-- A join of an updating aggregate with a table (updating input).
-- updating
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE users (user_id INT, name STRING, city STRING, level INT)
  WITH ('connector' = 'filesystem', 'path' = '${DATA}/users.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, n BIGINT, name STRING) WITH (${SINK});
INSERT INTO result
SELECT t.user_id, t.n, u.name FROM (SELECT user_id, COUNT(*) AS n FROM orders GROUP BY user_id) t JOIN users u ON t.user_id = u.user_id;
