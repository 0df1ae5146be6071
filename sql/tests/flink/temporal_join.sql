-- Event-time temporal join: each order with its product's price as of the order's time.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE prices (
  product STRING, price DECIMAL(10, 2), ts TIMESTAMP(3),
  PRIMARY KEY (product) NOT ENFORCED,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/prices.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, product STRING, amount DECIMAL(10, 2), price DECIMAL(10, 2), price_ts TIMESTAMP(3)) WITH (${SINK});
INSERT INTO result
SELECT o.order_id, o.product, o.amount, p.price, p.ts
FROM orders AS o JOIN prices FOR SYSTEM_TIME AS OF o.ts AS p ON o.product = p.product;
