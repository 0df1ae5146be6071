-- Top-N per product over the whole stream (updating).
-- updating
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (product STRING, order_id BIGINT, amount DECIMAL(10, 2)) WITH (${SINK});
INSERT INTO result
SELECT product, order_id, amount FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY product ORDER BY amount DESC, order_id) AS rn FROM orders) WHERE rn <= 2;
