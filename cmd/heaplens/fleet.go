package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/heaplens/heaplens/internal/fleet"
	"github.com/heaplens/heaplens/internal/launch"
)

// pushAuthEnv holds the Authorization header for --push, kept off the
// command line where ps would show it.
const pushAuthEnv = "HEAPLENS_PUSH_AUTHORIZATION"

// fleetFlags are heaplens run's flags for fleet profilers (docs/fleet.md).
type fleetFlags struct {
	addr, push, app, tenant string
	every                   time.Duration
	labels                  labelsFlag
}

func (f *fleetFlags) register(fs *flag.FlagSet) {
	f.labels = labelsFlag{}
	fs.StringVar(&f.addr, "pprof-addr", "", "serve /debug/pprof/heap and /debug/pprof/allocs on this address while the command runs (PORT alone means 127.0.0.1:PORT)")
	fs.StringVar(&f.push, "push", "", "push the profile to this Pyroscope-compatible server's /ingest every --push-every")
	fs.StringVar(&f.app, "app", "", "with --push, the application name (default: the command's name)")
	fs.DurationVar(&f.every, "push-every", fleet.DefaultPushEvery, "with --push, the period of the profiles pushed")
	fs.StringVar(&f.tenant, "push-tenant", "", "with --push, the X-Scope-OrgID of a multi-tenant server (the Authorization header, if needed, comes from $"+pushAuthEnv+")")
	fs.Var(f.labels, "label", "with --push, a series label NAME=VALUE (repeatable)")
}

// check validates the flags against the command to run.
func (f *fleetFlags) check(command []string) error {
	if f.push == "" {
		if f.app != "" || len(f.labels) > 0 || f.tenant != "" {
			return fmt.Errorf("--app, --label and --push-tenant go with --push")
		}
		return nil
	}
	u, err := url.Parse(f.push)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--push %q: want the server's http:// or https:// URL", f.push)
	}
	if f.app == "" {
		f.app = filepath.Base(command[0])
	}
	if err := fleet.CheckApp(f.app); err != nil {
		return fmt.Errorf("--app %q: %v", f.app, err)
	}
	if f.every < time.Second {
		return fmt.Errorf("--push-every %v: at least 1s", f.every)
	}
	return nil
}

// start makes the run feed a continuous profile, served and pushed as the
// flags ask; stop ends the pushing and says how it went.
func (f *fleetFlags) start(o *launch.Options, stderr io.Writer) (stop func(), err error) {
	if f.addr == "" && f.push == "" {
		return func() {}, nil
	}
	prof := fleet.New()
	o.Observer = prof
	if f.addr != "" {
		url, serve, err := fleet.Listen(f.addr, fleet.Handler(prof))
		if err != nil {
			return nil, fmt.Errorf("--pprof-addr: %w", err)
		}
		fmt.Fprintf(stderr, "heaplens: pprof endpoints at %s\n", url)
		go serve()
	}
	if f.push == "" {
		return func() {}, nil
	}
	ps := &fleet.Pusher{URL: f.push, App: f.app, Labels: f.labels, Every: f.every, Header: http.Header{}}
	if f.tenant != "" {
		ps.Header.Set("X-Scope-OrgID", f.tenant)
	}
	if auth := os.Getenv(pushAuthEnv); auth != "" {
		ps.Header.Set("Authorization", auth)
	}
	ps.Start(prof)
	return func() {
		st := ps.Stop(time.Now().Add(5 * time.Second))
		fmt.Fprintf(stderr, "heaplens: pushed %d profiles to %s", st.Pushed, f.push)
		if st.Rejected+st.Dropped > 0 {
			fmt.Fprintf(stderr, "; %d refused, %d dropped (last error: %s)", st.Rejected, st.Dropped, st.LastErr)
		}
		fmt.Fprintln(stderr)
	}, nil
}

// labelsFlag collects repeated --label NAME=VALUE.
type labelsFlag map[string]string

func (l labelsFlag) String() string {
	var kv []string
	for k, v := range l {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func (l labelsFlag) Set(s string) error {
	k, v, err := fleet.ParseLabel(s)
	if err != nil {
		return err
	}
	l[k] = v
	return nil
}
