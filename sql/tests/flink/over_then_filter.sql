-- A filter over an OVER aggregation's rows: orders above their user's moving average.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, amount DECIMAL(10, 2)) WITH (${SINK});
INSERT INTO result
SELECT order_id, amount FROM (SELECT order_id, amount, MAX(amount) OVER (PARTITION BY user_id ORDER BY ts ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS m FROM orders) WHERE amount = m;
