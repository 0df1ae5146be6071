-- Projection, filter and scalar functions: arithmetic (integer division
-- and MOD truncate toward zero), CASE, string functions, Flink's HOUR,
-- DATE_FORMAT, SPLIT_INDEX and REGEXP_EXTRACT.
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
CREATE TABLE result (
  order_id BIGINT,
  size STRING,
  cents_per_user BIGINT,
  remainder BIGINT,
  hour_of_day BIGINT,
  minute_text STRING,
  tag_upper STRING,
  first_part STRING,
  digits STRING
) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result
SELECT
  order_id,
  CASE WHEN amount >= 900 THEN 'large' WHEN amount >= 100 THEN 'medium' ELSE 'small' END,
  (amount - 500) / user_id,
  MOD(amount - 500, 7),
  HOUR(ts),
  DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm'),
  UPPER(tag) || '-' || CAST(user_id AS STRING),
  SPLIT_INDEX(tag || ':' || CAST(amount AS STRING), ':', 1),
  REGEXP_EXTRACT(tag, '([0-9]+)', 1)
FROM orders
WHERE MOD(order_id, 37) = 0 AND amount > 20;
