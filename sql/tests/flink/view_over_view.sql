-- Views stacked on views.
CREATE TABLE orders (
  order_id BIGINT, user_id INT, product STRING, amount DECIMAL(10, 2), qty INT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${DATA}/orders.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE VIEW priced AS SELECT user_id, amount, qty FROM orders WHERE amount > 100;
CREATE VIEW big_orders AS SELECT user_id, amount FROM priced WHERE qty > 5;
CREATE TABLE result (user_id INT, amount DECIMAL(10, 2)) WITH (${SINK});
INSERT INTO result
SELECT user_id, amount FROM big_orders WHERE user_id > 25;
