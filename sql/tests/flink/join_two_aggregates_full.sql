-- A FULL JOIN of two updating aggregates.
-- updating
-- modes: streaming batch
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE shipments (
  ship_id BIGINT, order_id BIGINT, carrier STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/shipments.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, orders BIGINT, ships BIGINT) WITH (${SINK});
INSERT INTO result
SELECT COALESCE(a.k, b.k), a.n, b.n FROM (SELECT MOD(order_id, 97) AS k, COUNT(*) AS n FROM orders WHERE qty > 4 GROUP BY MOD(order_id, 97)) a FULL JOIN (SELECT MOD(order_id, 89) AS k, COUNT(*) AS n FROM shipments GROUP BY MOD(order_id, 89)) b ON a.k = b.k;
