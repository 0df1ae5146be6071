-- INSERT INTO … VALUES: rows with expressions, NULLs and a timestamp literal.
-- modes: streaming batch
CREATE TABLE result (id INT, name STRING, score DOUBLE, at_time TIMESTAMP(3)) WITH (${SINK});
INSERT INTO result
VALUES (1, CAST('ann' AS STRING), 1.5 * 2, TIMESTAMP '2024-01-01 10:00:00.250'),
       (2, CAST(NULL AS STRING), CAST(NULL AS DOUBLE), TIMESTAMP '2024-01-02 00:00:00'),
       (3, UPPER('bob'), ABS(-4.25), CAST(NULL AS TIMESTAMP(3)));
