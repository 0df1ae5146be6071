-- LEFT interval join: orders without a shipment within 10 s come out padded once the watermark passes (append-only).
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE shipments (
  ship_id BIGINT, order_id BIGINT, carrier STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/shipments.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, ship_id BIGINT, carrier STRING) WITH (${SINK});
INSERT INTO result
SELECT o.order_id, s.ship_id, s.carrier FROM orders o LEFT JOIN shipments s ON o.order_id = s.order_id AND s.ts BETWEEN o.ts AND o.ts + INTERVAL '10' SECOND;
