-- Window join: orders and shipments in the same 30-second window.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE shipments (
  ship_id BIGINT, order_id BIGINT, carrier STRING, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/shipments.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (order_id BIGINT, ship_id BIGINT, window_start TIMESTAMP(3)) WITH (${SINK});
INSERT INTO result
SELECT L.order_id, R.ship_id, L.window_start FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '30' SECOND))) L JOIN (SELECT * FROM TABLE(TUMBLE(TABLE shipments, DESCRIPTOR(ts), INTERVAL '30' SECOND))) R ON L.order_id = R.order_id AND L.window_start = R.window_start AND L.window_end = R.window_end;
