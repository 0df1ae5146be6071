-- An aggregate over an inner join.
-- updating
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE products (product STRING, category STRING, price DOUBLE)
  WITH ('connector' = 'filesystem', 'path' = '${DATA}/products.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (category STRING, total DOUBLE) WITH (${SINK});
INSERT INTO result
SELECT p.category, SUM(o.qty * p.price) FROM orders o JOIN products p ON o.product = p.product GROUP BY p.category;
