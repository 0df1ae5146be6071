-- A table joined with itself.
CREATE TABLE users (user_id INT, name STRING, city STRING, level INT)
  WITH ('connector' = 'filesystem', 'path' = '${DATA}/users.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (a STRING, b STRING) WITH (${SINK});
INSERT INTO result
SELECT x.name, y.name FROM users x JOIN users y ON x.level = y.level AND x.user_id < y.user_id;
