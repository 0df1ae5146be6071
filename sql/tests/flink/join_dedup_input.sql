-- A join of a deduplicated (updating) input.
-- updating
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE users (user_id INT, name STRING, city STRING, level INT)
  WITH ('connector' = 'filesystem', 'path' = '${DATA}/users.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, order_id BIGINT, name STRING) WITH (${SINK});
INSERT INTO result
SELECT d.user_id, d.order_id, u.name FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY ts DESC) AS rn FROM orders) WHERE rn = 1) d JOIN users u ON d.user_id = u.user_id;
