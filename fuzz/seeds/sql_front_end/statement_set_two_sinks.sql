-- One job, two sinks: a statement set over one source (read once).
CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount BIGINT,
  tag STRING,
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
  'fields.amount.max' = '1000',
  'fields.tag.length' = '6'
);
CREATE TABLE big (order_id BIGINT, amount BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out/big', 'format' = 'csv');
CREATE TABLE per_minute (window_start TIMESTAMP(3), orders BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out/per_minute', 'format' = 'csv');
EXECUTE STATEMENT SET
BEGIN
INSERT INTO big SELECT order_id, amount FROM orders WHERE amount > 990;
INSERT INTO per_minute
  SELECT window_start, COUNT(*)
  FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
  GROUP BY window_start, window_end;
END;
