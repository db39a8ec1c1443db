package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestFleetFlagsOTLP(t *testing.T) {
	for _, tt := range []struct {
		name     string
		args     []string
		env      map[string]string
		endpoint string // "" when nothing is exported
		app      string
		err      string // a part of the error, "" for none
	}{
		{"nothing", nil, nil, "", "", ""},
		{"--otlp is a base URL", []string{"--otlp", "http://c:4318/"}, nil, "http://c:4318/v1development/profiles", "server", ""},
		{"--otlp over the environment", []string{"--otlp", "http://c:4318"}, map[string]string{"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": "http://e:1/p"},
			"http://c:4318/v1development/profiles", "server", ""},
		{"profiles endpoint as is", nil, map[string]string{"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": "http://e:1/p", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2"},
			"http://e:1/p", "server", ""},
		{"base endpoint", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2"}, "http://b:2/v1development/profiles", "server", ""},
		{"OTEL_SERVICE_NAME", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2", "OTEL_SERVICE_NAME": "api"},
			"http://b:2/v1development/profiles", "api", ""},
		{"--app over OTEL_SERVICE_NAME", []string{"--app", "web"}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2", "OTEL_SERVICE_NAME": "api"},
			"http://b:2/v1development/profiles", "web", ""},
		{"not a URL", []string{"--otlp", "c:4318"}, nil, "", "", "want an http"},
		{"labels are Pyroscope's", []string{"--otlp", "http://c:4318", "--label", "env=prod"}, nil, "", "", "--label and --push-tenant go with --push"},
		{"queue too small", []string{"--otlp", "http://c:4318", "--push-queue", "1KiB"}, nil, "", "", "at least 4KiB"},
		{"--otlp-command-line alone", []string{"--otlp-command-line"}, nil, "", "", "go with --push or --otlp"},
		{"bad headers", []string{"--otlp", "http://c:4318"}, map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "x"}, "", "", "OTEL_EXPORTER_OTLP_HEADERS"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f fleetFlags
		f.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		err := f.check([]string{"/srv/server"}, func(k string) string { return tt.env[k] })
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one with %q", tt.name, err, tt.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case f.otlpEndpoint != tt.endpoint || (tt.endpoint != "" && f.app != tt.app):
			t.Errorf("%s: endpoint %q app %q, want %q %q", tt.name, f.otlpEndpoint, f.app, tt.endpoint, tt.app)
		}
	}
}
