-- An aggregate of an updating aggregate (retractions through it).
-- updating
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (n BIGINT, users BIGINT) WITH (${SINK});
INSERT INTO result
SELECT n, COUNT(*) FROM (SELECT user_id, COUNT(*) AS n FROM orders GROUP BY user_id) GROUP BY n;
