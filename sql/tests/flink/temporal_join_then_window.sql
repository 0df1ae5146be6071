-- A temporal join keeps the orders' event time: revenue at the prices of the time, per minute.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE prices (
  product STRING, price DECIMAL(10, 2), ts TIMESTAMP(3),
  PRIMARY KEY (product) NOT ENFORCED,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/prices.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE VIEW priced AS
SELECT o.order_id, o.ts, o.qty * p.price AS revenue
FROM orders AS o JOIN prices FOR SYSTEM_TIME AS OF o.ts AS p ON o.product = p.product;
CREATE TABLE result (window_start TIMESTAMP(3), window_end TIMESTAMP(3), revenue DECIMAL(38, 2), n BIGINT) WITH (${SINK});
INSERT INTO result
SELECT window_start, window_end, SUM(revenue), COUNT(*)
FROM TABLE(TUMBLE(TABLE priced, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;
