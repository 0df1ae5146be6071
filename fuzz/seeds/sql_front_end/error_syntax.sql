-- error: line 3, column 13: Expected an expression, found: FROM
INSERT INTO result
SELECT FROM orders;
