-- Unbounded GROUP BY with several aggregates (updating).
-- updating
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, n BIGINT, total DECIMAL(38, 2), most DECIMAL(10, 2), least INT) WITH (${SINK});
INSERT INTO result
SELECT user_id, COUNT(*), SUM(amount), MAX(amount), MIN(qty) FROM orders GROUP BY user_id;
