-- error: table sink 'result' doesn't support consuming update changes
CREATE TABLE orders (user_id INT, amount BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10');
CREATE TABLE result (user_id INT, total BIGINT) WITH ('connector' = 'filesystem', 'path' = '/tmp/weir-fuzz-out', 'format' = 'csv');
INSERT INTO result SELECT user_id, SUM(amount) FROM orders GROUP BY user_id;
