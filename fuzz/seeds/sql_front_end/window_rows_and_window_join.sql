-- Window table functions on their own: HOP rows (each order in both of
-- its 10 s windows sliding by 5 s), and a window join — orders and their
-- shipments in the same 10 s tumbling window.
CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount BIGINT,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '6000',
  'rows-per-second' = '3000',
  'fields.order_id.kind' = 'sequence',
  'fields.order_id.start' = '0',
  'fields.order_id.end' = '5999',
  'fields.user_id.min' = '1',
  'fields.user_id.max' = '4',
  'fields.amount.min' = '1',
  'fields.amount.max' = '1000'
);
CREATE TABLE shipments (
  ship_id BIGINT,
  delay_s INT,
  order_ref AS ship_id * 3,
  shipped AS TO_TIMESTAMP_LTZ(1700000000000 + ship_id * 3 * 250 + delay_s * 1000, 3),
  WATERMARK FOR shipped AS shipped - INTERVAL '30' SECOND
) WITH (
  'connector' = 'datagen',
  'number-of-rows' = '2000',
  'rows-per-second' = '1000',
  'fields.ship_id.kind' = 'sequence',
  'fields.ship_id.start' = '0',
  'fields.ship_id.end' = '1999',
  'fields.delay_s.min' = '5',
  'fields.delay_s.max' = '25'
);
CREATE TABLE hopped (order_id BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3))
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out/hopped', 'format' = 'csv');
CREATE TABLE joined (order_id BIGINT, ship_id BIGINT, window_start TIMESTAMP(3))
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out/joined', 'format' = 'csv');
EXECUTE STATEMENT SET BEGIN
INSERT INTO hopped
SELECT order_id, window_start, window_end
FROM TABLE(HOP(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
WHERE MOD(order_id, 100) = 0;
INSERT INTO joined
SELECT L.order_id, R.ship_id, L.window_start
FROM (SELECT * FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND))) L
JOIN (SELECT * FROM TABLE(TUMBLE(TABLE shipments, DESCRIPTOR(shipped), INTERVAL '10' SECOND))) R
ON L.order_id = R.order_ref AND L.window_start = R.window_start AND L.window_end = R.window_end;
END;
