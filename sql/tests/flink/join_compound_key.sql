-- A join on two keys, one of them computed.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE users (user_id INT, name STRING, city STRING, level INT)
  WITH ('connector' = 'filesystem', 'path' = '${DATA}/users.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, name STRING) WITH (${SINK});
INSERT INTO result
SELECT o.order_id, u.name FROM orders o JOIN users u ON o.user_id = u.user_id AND MOD(o.qty, 3) = u.level;
