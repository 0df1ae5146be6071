-- Orders from Kafka, revenue per customer per minute back to Kafka, exactly
-- once. Run with a broker at localhost:9092 (`weir run examples/sql/kafka_orders.sql`);
-- the same DDL runs on Flink unchanged.
SET 'execution.checkpointing.interval' = '10 s';

CREATE TABLE orders (
  order_id BIGINT,
  customer STRING,
  amount DECIMAL(10, 2),
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'orders',
  'properties.bootstrap.servers' = 'localhost:9092',
  'properties.group.id' = 'weir-orders',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'json'
);

CREATE TABLE revenue (
  customer STRING,
  window_start TIMESTAMP(3),
  orders BIGINT,
  revenue DECIMAL(38, 2)
) WITH (
  'connector' = 'kafka',
  'topic' = 'revenue',
  'properties.bootstrap.servers' = 'localhost:9092',
  'key.format' = 'json',
  'key.fields' = 'customer',
  'format' = 'json',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = 'weir-revenue'
);

INSERT INTO revenue
SELECT customer, window_start, COUNT(*), SUM(amount)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY customer, window_start, window_end;
