module github.com/heaplens/heaplens

go 1.26.8

require (
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/klauspost/compress v1.20.3
	github.com/ulikunitz/xz v0.5.17
	// OTLP profiles (internal/fleet): the OpenTelemetry project's generated wire format, slim (no gRPC)
	go.opentelemetry.io/proto/slim/otlp v1.11.1
	go.opentelemetry.io/proto/slim/otlp/collector/profiles/v1development v0.4.1
	go.opentelemetry.io/proto/slim/otlp/profiles/v1development v0.4.1
	golang.org/x/arch v0.33.0 // x86asm: the jumps that lead to a stripped eval loop's .cold part (collect/pyeval.go)
	golang.org/x/sys v0.49.0
	google.golang.org/protobuf v1.36.12
)
