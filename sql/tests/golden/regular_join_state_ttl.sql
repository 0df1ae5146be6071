-- A regular join (no time condition) with 'table.exec.state.ttl' counted
-- in event time (Weir's 'weir.state.ttl.time'; Flink counts the TTL in
-- processing time): each side keeps its rows 10 s of event time, so only
-- shipments within 10 s of their order find it.
SET 'table.exec.state.ttl' = '10 s';
SET 'weir.state.ttl.time' = 'event-time';
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
CREATE TABLE result (order_id BIGINT, delay_s INT)
  WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT o.order_id, s.delay_s FROM orders o JOIN shipments s ON o.order_id = s.order_ref;
