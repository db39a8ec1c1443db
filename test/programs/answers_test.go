package programs

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The known answers of the programs, computed here independently of them.

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// workersAnswer is what workers.js prints: worker w counts the primes among
// w, w+workers, … below limit.
func workersAnswer(limit, workers int) string {
	var b strings.Builder
	total := 0
	for w := 0; w < workers; w++ {
		n := 0
		for c := w; c < limit; c += workers {
			if isPrime(c) {
				n++
			}
		}
		total += n
		fmt.Fprintf(&b, "worker %d: %d\n", w, n)
	}
	fmt.Fprintf(&b, "primes below %d: %d\n", limit, total)
	return b.String()
}

// nullChecksAnswer is what NullChecks.java prints: every every-th array is
// null, the others have length n.
func nullChecksAnswer(iterations, every, n int) string {
	nulls := iterations / every
	return fmt.Sprintf("sum %d, caught %d\n", (iterations-nulls)*n, nulls)
}

// perlAnswer is what count.pl prints on standard output.
func perlAnswer() string {
	const keys = 100_000
	sum, sevens := 0, 0
	for i := 0; i < keys; i++ {
		sum += i
		if i%10 == 7 {
			sevens++
		}
	}
	var primes []int
	for n := 2; n < 20_000; n++ {
		if isPrime(n) {
			primes = append(primes, n)
		}
	}
	return fmt.Sprintf("keys %d, sum %d\nending in 7: %d, first k7, last k%d\nprimes below 20000: %d, largest %d\n",
		keys, sum, sevens, keys-3, len(primes), primes[len(primes)-1])
}

// sqliteAnswer is what queries.sql prints for rows 1..n of x = 37i mod 1000.
func sqliteAnswer(n int) string {
	var b strings.Builder
	x := func(i int) int { return i * 37 % 1000 }
	sum, longest := 0, 0
	var count, sums [7]int
	var named []string
	kept := 0
	for i := 1; i <= n; i++ {
		sum += x(i)
		longest = max(longest, len("name-"+strconv.Itoa(i)))
		count[x(i)%7]++
		sums[x(i)%7] += x(i)
		if x(i) == 999 && len(named) < 3 {
			named = append(named, "name-"+strconv.Itoa(i))
		}
		if x(i) >= 500 {
			kept++
		}
	}
	fmt.Fprintf(&b, "%d|%d|%d\n", n, sum, longest)
	for r := range count {
		fmt.Fprintf(&b, "%d|%d|%d\n", r, count[r], sums[r])
	}
	for _, s := range named {
		fmt.Fprintln(&b, s)
	}
	fmt.Fprintf(&b, "%d\n", kept)
	return b.String()
}

// pipelineAnswer is what pipeline.sh prints on standard output: the three
// most common residues of 1..n mod m (ties by residue), the six commands'
// statuses, and the count of the digits of 1..n.
func pipelineAnswer(n, m int) string {
	counts := make([]int, m)
	digits := 0
	for i := 1; i <= n; i++ {
		counts[i%m]++
		digits += len(strconv.Itoa(i))
	}
	residues := make([]int, m)
	for r := range residues {
		residues[r] = r
	}
	sort.SliceStable(residues, func(a, b int) bool { return counts[residues[a]] > counts[residues[b]] })
	var b strings.Builder
	for _, r := range residues[:3] {
		fmt.Fprintf(&b, "%d: %d\n", r, counts[r])
	}
	fmt.Fprintf(&b, "pipeline status: 0 0 0 0 0 0\n%d\n", digits)
	return b.String()
}

// xzData is the file the xz case compresses: 3 MB of numbered lines, which
// compress well but not to nothing.
var xzData = sync.OnceValue(func() []byte {
	var b strings.Builder
	x := uint32(1)
	for i := 0; b.Len() < 3<<20; i++ {
		x = x*1664525 + 1013904223
		fmt.Fprintf(&b, "line %d: %08x %s\n", i, x, strings.Repeat("ab", int(x>>28)))
	}
	return []byte(b.String())
})
