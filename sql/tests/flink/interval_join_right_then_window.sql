-- A window count over a RIGHT interval join's rows (shipments keep their time).
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE shipments (
  ship_id BIGINT, order_id BIGINT, carrier STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/shipments.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE VIEW right_joined AS SELECT o.order_id, s.ship_id, s.ts FROM orders o
  RIGHT JOIN shipments s ON o.order_id = s.order_id AND o.ts BETWEEN s.ts - INTERVAL '10' SECOND AND s.ts;
CREATE TABLE result (window_start TIMESTAMP(3), n BIGINT, unmatched BIGINT) WITH (${SINK});
INSERT INTO result
SELECT window_start, COUNT(*), COUNT(*) FILTER (WHERE order_id IS NULL) FROM TABLE(TUMBLE(TABLE right_joined, DESCRIPTOR(ts), INTERVAL '30' SECOND)) GROUP BY window_start, window_end;
