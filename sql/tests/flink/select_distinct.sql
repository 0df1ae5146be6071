-- SELECT DISTINCT (updating).
-- updating
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (product STRING, qty INT) WITH (${SINK});
INSERT INTO result
SELECT DISTINCT product, qty FROM orders WHERE qty > 6;
