-- error: must equate the versioned table's primary key [product] with the other input
CREATE TABLE orders (product STRING, amount INT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
  WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE prices (product STRING, price INT, ts TIMESTAMP(3), PRIMARY KEY (product) NOT ENFORCED, WATERMARK FOR ts AS ts)
  WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE result (product STRING, price INT) WITH ('connector' = 'filesystem', 'path' = '${OUT}', 'format' = 'csv');
INSERT INTO result
SELECT o.product, p.price FROM orders AS o JOIN prices FOR SYSTEM_TIME AS OF o.ts AS p ON o.amount = p.price;
