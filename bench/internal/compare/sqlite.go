package compare

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sqlScript is the generated script for args (ROWS BULK), in the temporary
// directory.
func (b *bench) sqlScript(args []string) string {
	return filepath.Join(b.tmp, "sqlite-"+strings.Join(args, "-")+".sql")
}

// sqlDB is the database file, removed before every run.
func (b *bench) sqlDB(args []string) string {
	return filepath.Join(b.tmp, "sqlite-"+strings.Join(args, "-")+".db")
}

// sqlResult is where the script writes its query results.
func (b *bench) sqlResult(args []string) string {
	return filepath.Join(b.tmp, "sqlite-"+strings.Join(args, "-")+".out")
}

// writeSQL writes the sqlite3 script for args: ROWS single-row INSERTs (one
// statement parsed and prepared each: the allocation-heavy part of a
// scripted load), a bulk INSERT…SELECT of BULK rows from a recursive CTE,
// two indexes, then joins and aggregates. Query results go to a file (the
// checksum); standard output gets only sqlite3's peak RSS (its VmHWM line)
// and its /proc/PID/stat line (CPU time), read by a shell it starts.
func (b *bench) writeSQL(args []string) error {
	rows, err := strconv.Atoi(args[0])
	if err != nil || rows < 1 {
		return fmt.Errorf("sqlite3: bad row count %q", args[0])
	}
	bulk, err := strconv.Atoi(args[1])
	if err != nil || bulk < 1 {
		return fmt.Errorf("sqlite3: bad bulk count %q", args[1])
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, ".output %s\n", b.sqlResult(args))
	sb.WriteString("PRAGMA journal_mode=OFF;\nPRAGMA synchronous=OFF;\n")
	sb.WriteString("CREATE TABLE person(id INTEGER PRIMARY KEY, name TEXT, city TEXT, age INTEGER, bio TEXT);\n")
	sb.WriteString("CREATE TABLE visit(id INTEGER PRIMARY KEY, person INTEGER, day INTEGER, amount REAL, note TEXT);\n")
	sb.WriteString("BEGIN;\n")
	for i := 0; i < rows; i++ {
		fmt.Fprintf(&sb, "INSERT INTO person VALUES(%d,'name%07d','city%03d',%d,'bio-%s');\n",
			i, (i*7919)%rows, i%500, 18+i%60, strings.Repeat("x", i%200))
	}
	sb.WriteString("COMMIT;\n")
	fmt.Fprintf(&sb, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<%d) "+
		"INSERT INTO visit SELECT x, (x*31)%%%d, x%%365, (x%%1000)/10.0, printf('note %%d %%s', x, substr('abcdefghijklmnopqrstuvwxyz', 1+x%%26)) FROM c;\n", bulk, rows)
	sb.WriteString("CREATE INDEX person_name ON person(name);\n")
	sb.WriteString("CREATE INDEX visit_person ON visit(person, day);\n")
	sb.WriteString("SELECT city, count(*), sum(v.amount) FROM person p JOIN visit v ON v.person=p.id GROUP BY city ORDER BY 3 DESC, 1 LIMIT 3;\n")
	sb.WriteString("SELECT count(*), max(length(bio)) FROM person WHERE name LIKE 'name00%';\n")
	sb.WriteString("SELECT day, avg(amount) FROM visit GROUP BY day ORDER BY 2 DESC, 1 LIMIT 3;\n")
	sb.WriteString("SELECT group_concat(name) FROM (SELECT name FROM person ORDER BY bio DESC, name LIMIT 20);\n")
	sb.WriteString("SELECT count(DISTINCT note), sum(length(note)) FROM visit WHERE day < 100;\n")
	sb.WriteString(".output stdout\n")
	// The shell's parent is sqlite3. (sqlite3 strips quotes from dot-command
	// arguments: the command must need none.)
	sb.WriteString(".shell grep VmHWM /proc/$PPID/status\n")
	sb.WriteString(".shell cat /proc/$PPID/stat\n") // its CPU time, told apart from a profiler's agent
	return os.WriteFile(b.sqlScript(args), []byte(sb.String()), 0o644)
}
