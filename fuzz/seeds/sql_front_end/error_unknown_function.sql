-- error: Invalid function 'summ'.
CREATE TABLE orders (
  order_id BIGINT,
  user_id INT,
  amount BIGINT,
  ts AS TO_TIMESTAMP_LTZ(1700000000000 + order_id * 250, 3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE result (a BIGINT, b BIGINT) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result SELECT order_id, summ(amount) FROM orders;
