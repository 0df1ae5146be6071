-- Temporal join against a versioned view: the latest price row per product by rowtime (deduplication).
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE price_log (
  product STRING, price DECIMAL(10, 2), ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/prices.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE VIEW latest_price AS
SELECT product, price, ts FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY product ORDER BY ts DESC) AS rn FROM price_log
) WHERE rn = 1;
CREATE TABLE result (order_id BIGINT, product STRING, price DECIMAL(10, 2)) WITH (${SINK});
INSERT INTO result
SELECT o.order_id, o.product, p.price
FROM orders AS o JOIN latest_price FOR SYSTEM_TIME AS OF o.ts AS p ON o.product = p.product;
