package export

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/heap"
)

// QueryParam is one parameter of a Query, spelt the same way everywhere:
// as a flag of heaplens report (--NAME VALUE) and as a URL parameter of the
// web UI (NAME=VALUE).
type QueryParam struct {
	Name  string
	Usage string
	set   func(q *Query, v string) error
}

// QueryParams lists every parameter of a Query, in the order help shows them.
var QueryParams = []QueryParam{
	{"view", "view: " + strings.Join(Views, ", "), func(q *Query, v string) error {
		if !slices.Contains(Views, v) {
			return fmt.Errorf("unknown view %q (%s)", v, strings.Join(Views, ", "))
		}
		q.View = v
		return nil
	}},
	{"at", "live: time into the run, e.g. 1.5s (default: the end, the last allocation or free)", func(q *Query, v string) error {
		return setDuration(&q.At, v)
	}},
	{"lifetime", "temporary: blocks freed within this long of their allocation (default " + heap.DefaultLifetime.String() + ")", func(q *Query, v string) error {
		return setDuration(&q.Lifetime, v)
	}},
	{"min-age", "leaks: only blocks at least this old when the process's records end", func(q *Query, v string) error {
		return setDuration(&q.MinAge, v)
	}},
	{"window", "only what was allocated in this window FROM,UNTIL of times into the run, e.g. 1.5s,2s (a test, as the pytest plugin names it)", func(q *Query, v string) error {
		from, until, ok := strings.Cut(v, ",")
		if !ok {
			return errors.New("want FROM,UNTIL, e.g. 1.5s,2s")
		}
		if err := setDuration(&q.From, from); err != nil {
			return err
		}
		if err := setDuration(&q.Until, until); err != nil {
			return err
		}
		if q.Until < q.From {
			return errors.New("UNTIL is before FROM")
		}
		return nil
	}},
	{"pid", "only this process (every image of the pid)", func(q *Query, v string) error {
		pid, err := strconv.Atoi(v)
		if err == nil && pid <= 0 {
			err = errors.New("must be positive")
		}
		q.PID = pid
		return err
	}},
	{"kind", "only this kind of memory: " + strings.Join(capture.MemKinds, ", ") + " (mappings the program made itself)", func(q *Query, v string) error {
		if !slices.Contains(capture.MemKinds, v) {
			return fmt.Errorf("unknown kind %q (%s)", v, strings.Join(capture.MemKinds, ", "))
		}
		q.Kind = v
		return nil
	}},
	{"thread", "only allocations made by this thread id", func(q *Query, v string) error {
		t, err := strconv.ParseUint(v, 10, 32)
		q.Thread = uint32(t)
		return err
	}},
	{"focus", "only stacks with a frame matching this regexp", func(q *Query, v string) error {
		q.Focus = v
		return nil
	}},
	{"hide", "leave frames matching this regexp out of stacks", func(q *Query, v string) error {
		q.Hide = v
		return nil
	}},
}

func setDuration(d *time.Duration, v string) error {
	x, err := time.ParseDuration(v)
	if err == nil && x < 0 {
		err = errors.New("must not be negative")
	}
	*d = x
	return err
}

// NewQuery returns the Query of a view with no filters: live at the end,
// temporary with the default lifetime.
func NewQuery(view string) Query {
	return Query{View: view, At: AtEnd}
}

// Set sets the parameter name of q from its text form.
func (q *Query) Set(name, value string) error {
	for _, p := range QueryParams {
		if p.Name == name {
			if err := p.set(q, value); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("unknown parameter %q", name)
}

// ParseQuery reads a Query from named parameters (URL parameters: get is
// url.Values.Get); absent or empty ones keep their defaults.
func ParseQuery(view string, get func(name string) string) (Query, error) {
	q := NewQuery(view)
	for _, p := range QueryParams {
		if v := get(p.Name); v != "" {
			if err := q.Set(p.Name, v); err != nil {
				return q, err
			}
		}
	}
	return q, nil
}
