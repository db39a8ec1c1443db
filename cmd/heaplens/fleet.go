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

	"github.com/heaplens/heaplens/internal/capture"
	"github.com/heaplens/heaplens/internal/export"
	"github.com/heaplens/heaplens/internal/fleet"
	"github.com/heaplens/heaplens/internal/size"
)

// pushAuthEnv holds the Authorization header for --push, kept off the
// command line where ps would show it.
const pushAuthEnv = "HEAPLENS_PUSH_AUTHORIZATION"

// fleetFlags are heaplens run's and attach's flags for fleet profilers
// (docs/fleet.md).
type fleetFlags struct {
	addr, push, app, tenant string
	otlp                    string // the OTLP base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
	otlpCmdline             bool
	every                   time.Duration
	queue                   uint64
	labels                  labelsFlag

	otlpEndpoint string // the profiles endpoint: from --otlp or the environment
	otlpFrom     string // where otlpEndpoint came from, for the start message
	otlpEnv      fleet.OTLPEnv
}

func (f *fleetFlags) register(fs *flag.FlagSet) {
	f.labels = labelsFlag{}
	fs.StringVar(&f.addr, "pprof-addr", "", "serve /debug/pprof/heap and /debug/pprof/allocs on this address while the command runs (PORT alone means 127.0.0.1:PORT)")
	fs.StringVar(&f.push, "push", "", "push the profile to this Pyroscope-compatible server's /ingest every --push-every")
	fs.StringVar(&f.app, "app", "", "with --push or --otlp, the application name, OTLP's service.name (default: $OTEL_SERVICE_NAME with --otlp, else the command's name)")
	fs.DurationVar(&f.every, "push-every", fleet.DefaultPushEvery, "with --push or --otlp, the period of the profiles sent")
	fs.StringVar(&f.tenant, "push-tenant", "", "with --push, the X-Scope-OrgID of a multi-tenant server (the Authorization header, if needed, comes from $"+pushAuthEnv+")")
	fs.Var(f.labels, "label", "with --push, a series label NAME=VALUE (repeatable)")
	fs.StringVar(&f.otlp, "otlp", "", "export OTLP/HTTP profiles every --push-every to this OpenTelemetry Collector base URL (e.g. http://127.0.0.1:4318; "+fleet.OTLPProfilesPath+" is added); default $OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT")
	fs.BoolVar(&f.otlpCmdline, "otlp-command-line", false, "with --otlp, add the resource attribute process.command_line (command lines may hold secrets)")
	fs.Var(sizeFlag{&f.queue}, "push-queue", "with --push or --otlp, the most gzipped profiles kept while the server is unreachable (default 16MiB)")
}

// check validates the flags against the command to run; getenv reads the
// OpenTelemetry SDK's environment variables.
func (f *fleetFlags) check(command []string, getenv func(string) string) error {
	env, err := fleet.ReadOTLPEnv(getenv)
	if err != nil {
		return err
	}
	f.otlpEnv = env
	switch {
	case f.otlp != "":
		f.otlpEndpoint, f.otlpFrom = fleet.OTLPEndpoint(f.otlp), "--otlp"
	case getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") != "":
		f.otlpEndpoint, f.otlpFrom = env.Endpoint, "$OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"
	case env.Endpoint != "":
		f.otlpEndpoint, f.otlpFrom = env.Endpoint, "$OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	if f.push == "" && f.otlpEndpoint == "" {
		if f.app != "" || len(f.labels) > 0 || f.tenant != "" || f.queue != 0 || f.otlpCmdline {
			return fmt.Errorf("--app, --push-queue and --otlp-command-line go with --push or --otlp; --label and --push-tenant with --push")
		}
		return nil
	}
	if f.push == "" && (len(f.labels) > 0 || f.tenant != "") {
		return fmt.Errorf("--label and --push-tenant go with --push (for --otlp, set $OTEL_RESOURCE_ATTRIBUTES)")
	}
	if f.push != "" {
		u, err := url.Parse(f.push)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--push %q: want the server's http:// or https:// URL", f.push)
		}
	}
	if f.otlpEndpoint != "" {
		if err := fleet.CheckOTLPEndpoint(f.otlpEndpoint); err != nil {
			return fmt.Errorf("%s: %v", f.otlpFrom, err)
		}
	}
	if f.app == "" && f.push == "" {
		f.app = env.ServiceName // OTEL_SERVICE_NAME: --app comes first
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
	if f.queue != 0 && f.queue < 4<<10 {
		return fmt.Errorf("--push-queue %d: at least 4KiB", f.queue)
	}
	return nil
}

// start makes the run feed a continuous profile, served and pushed as the
// flags ask (observer is where the capture's records go); stop ends the
// pushing and says how it went.
func (f *fleetFlags) start(observer *capture.Observer, stderr io.Writer) (stop func(), err error) {
	if f.addr == "" && f.push == "" && f.otlpEndpoint == "" {
		return func() {}, nil
	}
	prof := fleet.New()
	*observer = prof
	if f.addr != "" {
		url, serve, err := fleet.Listen(f.addr, fleet.Handler(prof))
		if err != nil {
			return nil, fmt.Errorf("--pprof-addr: %w", err)
		}
		fmt.Fprintf(stderr, "heaplens: pprof endpoints at %s\n", url)
		go serve()
	}
	var stops []func()
	if f.push != "" {
		ps := &fleet.Pusher{URL: f.push, App: f.app, Labels: f.labels, Every: f.every, MaxQueue: int(f.queue), Header: http.Header{}, Log: stderr}
		if f.tenant != "" {
			ps.Header.Set("X-Scope-OrgID", f.tenant)
		}
		if auth := os.Getenv(pushAuthEnv); auth != "" {
			ps.Header.Set("Authorization", auth)
		}
		ps.Start(prof)
		stops = append(stops, func() {
			st := ps.Stop(time.Now().Add(5 * time.Second))
			fmt.Fprintf(stderr, "heaplens: pushed %d profiles to %s", st.Pushed, f.push)
			printLosses(stderr, st)
		})
	}
	if f.otlpEndpoint != "" {
		ps := &fleet.Pusher{URL: f.otlpEndpoint, App: f.app, Every: f.every, MaxQueue: int(f.queue), Header: http.Header{}, Log: stderr,
			OTLP: &fleet.OTLP{Resource: f.otlpResource(), CommandLine: f.otlpCmdline, Version: version}}
		for k, v := range f.otlpEnv.Headers {
			ps.Header.Set(k, v)
		}
		if f.otlpFrom != "--otlp" {
			fmt.Fprintf(stderr, "heaplens: exporting OTLP profiles to %s (from %s)\n", f.otlpEndpoint, f.otlpFrom)
		}
		ps.Start(prof)
		stops = append(stops, func() {
			st := ps.Stop(time.Now().Add(5 * time.Second))
			fmt.Fprintf(stderr, "heaplens: exported %d OTLP profile requests (%s) to %s", st.Pushed, size.FormatSize(uint64(st.Bytes)), f.otlpEndpoint)
			printLosses(stderr, st)
		})
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}, nil
}

// otlpResource is the resource of the OTLP profiles but the process's own
// attributes: service.name (--app), host.name, then
// $OTEL_RESOURCE_ATTRIBUTES.
func (f *fleetFlags) otlpResource() []export.KeyValue {
	res := []export.KeyValue{{Key: export.AttrServiceName, Value: f.app}}
	host, _ := os.Hostname()
	if host != "" {
		res = append(res, export.KeyValue{Key: export.AttrHostName, Value: host})
	}
	for _, kv := range f.otlpEnv.Resource {
		if kv.Key != export.AttrHostName || host == "" {
			res = append(res, kv)
		}
	}
	return res
}

// printLosses ends a pusher's summary line with what did not arrive.
func printLosses(w io.Writer, st fleet.PushStats) {
	if st.Rejected+st.Dropped > 0 {
		fmt.Fprintf(w, "; %d refused, %d dropped (last error: %s)", st.Rejected, st.Dropped, st.LastErr)
	} else if st.LastErr != "" {
		fmt.Fprintf(w, " (%s)", st.LastErr)
	}
	fmt.Fprintln(w)
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
