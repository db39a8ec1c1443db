#!/usr/bin/env bash
# Builds, once, the OpenTelemetry Collector that test/e2e/otlp_test.go
# exports to (test/otelcol: the collector project's own modules, in a module
# of its own so that the product's go.mod does not carry them), and links it
# as bin/otelcol. The binary is cached outside the clone, like Go's module
# cache, under a key of everything that goes into it (test/otelcol's go.mod,
# go.sum and Go files, and the Go version):
# ~/.cache/heaplens/otelcol/KEY/otelcol (XDG_CACHE_HOME honoured). The first
# build takes minutes (some 200 modules); after it, a fresh clone on the same
# machine only makes the link.
#
# test/otelcol/go.mod is kept with `go mod tidy -e`: plain tidy also wants
# the test-only dependencies of the contrib file exporter, one of which the
# Go module proxy does not serve.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"

src=test/otelcol
key=$( { cat "$src/go.mod" "$src/go.sum" "$src"/*.go; "$GO" version; } | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/heaplens/otelcol"
bin="$cache/$key/otelcol"
mkdir -p bin
if [ ! -x "$bin" ]; then
	# One builder at a time (several clones share the cache): the others
	# wait, then find it built.
	mkdir -p "$cache"
	exec 9>"$cache/lock"
	flock 9
	if [ ! -x "$bin" ]; then
		echo "otelcol: building the test collector into $bin (once; minutes)" >&2
		start=$(date +%s)
		mkdir -p "$cache/$key"
		(cd "$src" && "$GO" build -trimpath -o "$bin.tmp" .)
		mv "$bin.tmp" "$bin"
		echo "otelcol: built in $(( $(date +%s) - start )) s" >&2
	fi
fi
ln -sfn "$bin" bin/otelcol
