// Command otelcol is an OpenTelemetry Collector built from the collector
// project's own modules for heaplens's tests (test/e2e/otlp_test.go): the
// otlp receiver; the file exporter (OTLP protobuf, length-prefixed, so that
// a test reads back exactly what the collector received and re-encoded);
// the debug exporter; and the otlp_grpc exporter, which forwards to another
// collector or to Pyroscope as docs/fleet.md configures it. It is a module
// of its own so that the product's go.mod does not carry the collector;
// scripts/otelcol.sh builds and caches it.
package main

import (
	"log"

	fileexporter "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func components() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory(), debugexporter.NewFactory(), otlpexporter.NewFactory()); err != nil {
		return f, err
	}
	f.Telemetry = otelconftelemetry.NewFactory()
	return f, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol", Description: "OpenTelemetry Collector for heaplens's tests", Version: "0.165.0-heaplens"},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			ProviderFactories: []confmap.ProviderFactory{envprovider.NewFactory(), fileprovider.NewFactory(), yamlprovider.NewFactory()},
			DefaultScheme:     "env",
		}},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatal(err)
	}
}
