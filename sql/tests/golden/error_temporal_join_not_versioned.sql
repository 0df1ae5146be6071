-- error: is not a versioned table: declare its PRIMARY KEY (…) NOT ENFORCED
CREATE TABLE orders (product STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
  WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE prices (product STRING, price INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
  WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE result (product STRING, price INT) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT o.product, p.price FROM orders AS o JOIN prices FOR SYSTEM_TIME AS OF o.ts AS p ON o.product = p.product;
