-- COUNT(DISTINCT …) in an unbounded GROUP BY.
-- updating
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (product STRING, users BIGINT) WITH (${SINK});
INSERT INTO result
SELECT product, COUNT(DISTINCT user_id) FROM orders GROUP BY product;
