-- Deduplication keeping each user's first order by rowtime (append-only).
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (user_id INT, order_id BIGINT, ts TIMESTAMP(3)) WITH (${SINK});
INSERT INTO result
SELECT user_id, order_id, ts FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY ts ASC) AS rn FROM orders) WHERE rn = 1;
