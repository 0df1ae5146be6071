-- VALUES as a source: a small inline table joined with the orders and aggregated (updating).
-- updating
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (product STRING, label STRING, weight INT, n BIGINT, qty BIGINT) WITH (${SINK});
INSERT INTO result
SELECT o.product, l.label, l.weight, COUNT(*), SUM(o.qty * l.weight)
FROM orders AS o JOIN (VALUES ('p00', 'cheap', 1), ('p01', 'cheap', 2), ('p11', 'dear!', 3)) AS l (product, label, weight)
  ON o.product = l.product
GROUP BY o.product, l.label, l.weight;
