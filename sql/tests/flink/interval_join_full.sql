-- FULL interval join: unmatched rows of both sides, padded.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE shipments (
  ship_id BIGINT, order_id BIGINT, carrier STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/shipments.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, ship_id BIGINT) WITH (${SINK});
INSERT INTO result
SELECT o.order_id, s.ship_id FROM orders o FULL JOIN shipments s ON o.order_id = s.order_id AND s.ts BETWEEN o.ts - INTERVAL '2' SECOND AND o.ts + INTERVAL '8' SECOND;
