-- Event-time temporal LEFT join: orders of p05 before its first price keep NULL price columns.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE prices (
  product STRING, price DECIMAL(10, 2), ts TIMESTAMP(3),
  PRIMARY KEY (product) NOT ENFORCED,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/prices.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, product STRING, price DECIMAL(10, 2)) WITH (${SINK});
INSERT INTO result
SELECT o.order_id, o.product, p.price
FROM orders AS o LEFT JOIN prices FOR SYSTEM_TIME AS OF o.ts AS p ON o.product = p.product;
