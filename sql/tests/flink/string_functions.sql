-- String functions.
CREATE TABLE users (user_id INT, name STRING, city STRING, level INT)
  WITH ('connector' = 'filesystem', 'path' = '${DATA}/users.csv', 'format' = 'csv', 'csv.null-literal' = '');
CREATE TABLE result (a STRING, b INT, c STRING, d STRING) WITH (${SINK});
INSERT INTO result
SELECT CONCAT(name, '@', COALESCE(city, 'nowhere')), CHAR_LENGTH(name), SUBSTRING(name, 2, 3), LOWER(UPPER(name)) FROM users;
