package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// The library names a stack by the top 48 bits of its hash (preload/sampler.c,
// stack_hash; docs/ring-format.md, "A stack's identity"): the collision
// argument assumes the hash behaves as a random function on real stacks.
// stackhash.c hashes 2^20 distinct stacks shaped like real ones (siblings a
// few bytes apart) with the library's own MIX, both fold orders, and counts
// what collides; a random function gives, for n stacks:
//   - pairs of equal 48-bit keys: C(n,2)/2^48 ≈ 0.002 expected, so any is a
//     failure (0.2 % for a random function);
//   - pairs equal in the key's top or low 24 bits: about Poisson with mean
//     μ = C(n,2)/2^24 ≈ 32768: within 6√μ;
//   - the chi-square of the 16384 home slots: mean 16383, variance 2·16383:
//     within 6σ.
//
// A fold without the multiply's spread (x·31 + v) is 19σ off on the top bits.
func TestStackHashKeys(t *testing.T) {
	bin := build(t, t.TempDir(), "stackhash.c")
	for _, seed := range []string{"1", "2", "3"} {
		res := run(t, 2*time.Minute, bin, seed)
		if res.code != 0 {
			t.Fatalf("stackhash %s: exit %d\n%s", seed, res.code, res.stderr)
		}
		lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
		if len(lines) != 2 {
			t.Fatalf("stackhash %s: want 2 lines, got:\n%s", seed, res.stdout)
		}
		for _, line := range lines {
			var splice int
			var n, p48, hi, lo uint64
			var chi2 float64
			if _, err := fmt.Sscanf(line, "splice=%d stacks=%d pairs48=%d pairs_hi24=%d pairs_lo24=%d chi2=%g",
				&splice, &n, &p48, &hi, &lo, &chi2); err != nil {
				t.Fatalf("stackhash %s: %q: %v", seed, line, err)
			}
			t.Logf("seed %s: %s", seed, line)
			pairs := float64(n) * float64(n-1) / 2
			mu := pairs / (1 << 24)
			slots := 16384.0
			sigma := math.Sqrt(2 * (slots - 1))
			if p48 != 0 {
				t.Errorf("seed %s, splice %d: %d pairs of %d distinct stacks share a 48-bit key (a random function: %.4f expected)", seed, splice, p48, n, pairs/(1<<48))
			}
			for _, c := range []struct {
				what string
				got  uint64
			}{{"top", hi}, {"low", lo}} {
				if d := math.Abs(float64(c.got) - mu); d > 6*math.Sqrt(mu) {
					t.Errorf("seed %s, splice %d: %d pairs equal in the key's %s 24 bits, a random function gives %.0f ± %.0f: %.1fσ off",
						seed, splice, c.got, c.what, mu, math.Sqrt(mu), d/math.Sqrt(mu))
				}
			}
			if d := math.Abs(chi2 - (slots - 1)); d > 6*sigma {
				t.Errorf("seed %s, splice %d: home slots' chi-square %.0f, a random function gives %.0f ± %.0f: %.1fσ off",
					seed, splice, chi2, slots-1, sigma, d/sigma)
			}
		}
	}
}
