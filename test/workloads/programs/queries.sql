-- queries.sql: the sqlite3 case's script. Its answers are known: the test
-- computes them itself.
CREATE TABLE t(id INTEGER PRIMARY KEY, x INTEGER, name TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
INSERT INTO t(x, name) SELECT (i * 37) % 1000, 'name-' || i FROM n;
CREATE INDEX t_x ON t(x);
SELECT count(*), sum(x), max(length(name)) FROM t;
SELECT x % 7 AS r, count(*), sum(x) FROM t GROUP BY r ORDER BY r;
SELECT name FROM t WHERE x = 999 ORDER BY id LIMIT 3;
DELETE FROM t WHERE x < 500;
VACUUM;
SELECT count(*) FROM t;
