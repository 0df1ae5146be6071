-- A window aggregate over an interval join (its output keeps event time).
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE shipments (
  ship_id BIGINT, order_id BIGINT, carrier STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/shipments.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE VIEW shipped AS SELECT o.order_id, o.ts FROM orders o JOIN shipments s
  ON o.order_id = s.order_id AND s.ts BETWEEN o.ts - INTERVAL '1' SECOND AND o.ts + INTERVAL '10' SECOND;
CREATE TABLE result (window_start TIMESTAMP(3), n BIGINT) WITH (${SINK});
INSERT INTO result
SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE shipped, DESCRIPTOR(ts), INTERVAL '30' SECOND)) GROUP BY window_start, window_end;
