-- Projection and filter over an append-only table.
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, double_qty INT, product STRING, amount DECIMAL(10, 2)) WITH (${SINK});
INSERT INTO result
SELECT order_id, qty * 2, UPPER(product), amount FROM orders WHERE amount > 500 AND qty <> 3;
