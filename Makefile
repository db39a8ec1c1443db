# heaplens: `make` builds bin/heaplens (one file, libheaplens.so embedded).
GO      ?= go
CC      ?= gcc
CFLAGS  ?= -O2 -g
PRELOAD_CFLAGS = -std=c11 -fPIC -shared -fvisibility=hidden -ftls-model=initial-exec \
                 -Wall -Wextra -Wshadow -Wconversion -Wmissing-prototypes -Wstrict-prototypes \
                 -Wpointer-arith -Wcast-align -Werror -Wl,-z,now -Wl,--build-id \
                 -include preload/glibc217.h
# glibc 2.17 and later (preload/glibc217.h): libdl and libpthread, which
# held dlopen and pthread_key_create until 2.34, are named as they were.
PRELOAD_LIBS = -lm -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--as-needed -lgcc_s
PRELOAD_SRC = $(wildcard preload/*.c)
SO      = internal/launch/lib/libheaplens.so
# The same sources for heaplens attach (preload/attach.c): dlopen'ed late, so
# dynamic TLS; its own definitions bound locally, as the agent points GOT
# entries at them.
ATTACH_SO = internal/launch/lib/libheaplens-attach.so
ATTACH_CFLAGS = $(filter-out -ftls-model=initial-exec,$(PRELOAD_CFLAGS)) -DHEAPLENS_ATTACH \
                -mtls-dialect=gnu2 -Wl,-Bsymbolic-functions

.PHONY: all test test-cpython test-platforms bench demo clean deps sanitize wheel sidroot oldroot armroot otelcol pyft
all: bin/heaplens

$(SO): $(PRELOAD_SRC) $(wildcard preload/*.h)
	$(CC) $(CFLAGS) $(PRELOAD_CFLAGS) -o $@ $(PRELOAD_SRC) $(PRELOAD_LIBS)

$(ATTACH_SO): $(PRELOAD_SRC) $(wildcard preload/*.h)
	$(CC) $(CFLAGS) $(ATTACH_CFLAGS) -o $@ $(PRELOAD_SRC) $(PRELOAD_LIBS)

# Without cgo: a static program, which runs on any glibc (docs/platforms.md).
GO_SRC = $(shell find cmd internal -name '*.go' -not -name '*_test.go') $(wildcard internal/web/assets/*) go.mod go.sum
GO_LDFLAGS = -ldflags=-E=github.com/heaplens/heaplens/internal/sigstart.entry
bin/heaplens: $(SO) $(ATTACH_SO) $(GO_SRC)
	CGO_ENABLED=0 $(GO) build $(GO_LDFLAGS) -o $@ ./cmd/heaplens

# arm64 (docs/platforms.md): the library from Debian's cross compiler
# (gcc-aarch64-linux-gnu), embedded into the agent built with GOARCH=arm64.
# No attach library: attach is x86-64 only. Tested in the arm64 root
# (make armroot) through qemu-user.
ARM64_CC ?= aarch64-linux-gnu-gcc
SO_ARM64 = internal/launch/lib-arm64/libheaplens.so
$(SO_ARM64): $(PRELOAD_SRC) $(wildcard preload/*.h)
	@command -v $(ARM64_CC) >/dev/null || { echo "$(ARM64_CC) is missing: apt-get install gcc-aarch64-linux-gnu" >&2; exit 1; }
	$(ARM64_CC) $(CFLAGS) $(PRELOAD_CFLAGS) -o $@ $(PRELOAD_SRC) $(PRELOAD_LIBS)

bin/heaplens-arm64: $(SO_ARM64) $(GO_SRC)
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build $(GO_LDFLAGS) -o $@ ./cmd/heaplens

# Installs what the tests need on a fresh Debian machine, then runs them all.
deps:
	./scripts/deps.sh

test: deps bin/heaplens wheel sidroot oldroot bin/heaplens-static otelcol
	$(GO) vet ./...
	CGO_ENABLED=0 GOARCH=arm64 $(GO) vet ./cmd/... ./internal/...
	$(GO) test -count=1 -timeout 25m ./...
	@echo '!!! arm64 is NOT tested by make test (qemu-user is ~10x slower): make test-platforms runs TestARM64Profiles in the arm64 root (make armroot)'
	@echo "!!! free-threaded CPython (3.14t) is NOT tested: heaplens turns Python frames off for it (issue 35), and make pyft cannot build it where the Debian mirror serves no source packages"

# The OpenTelemetry Collector the OTLP export is tested against
# (test/otelcol), built once into ~/.cache/heaplens/otelcol and linked as
# bin/otelcol (scripts/otelcol.sh).
otelcol:
	./scripts/otelcol.sh

# CPython versions newer than the machine's run in a cached Debian sid root
# (scripts/debroot.sh sid; ~/.cache/heaplens/roots/sid-py), where the tests
# start the static heaplens (no cgo: it runs on the root's glibc) in a chroot.
sidroot:
	./scripts/debroot.sh sid

# CPython 3.14 free-threaded (--disable-gil), built from Debian's python3.14
# source package inside the sid root, cached there (/opt/python3.14t):
# minutes, so not part of make test
pyft: sidroot
	./scripts/pyft.sh

# glibc 2.17 and later (docs/platforms.md): a cached Debian 11 root
# (~/.cache/heaplens/roots/bullseye: glibc 2.31, python3.9, gcc-multilib,
# musl-tools) where the wheel is installed with pip and checked. make test
# runs a subset (TestOldGlibc*); test-platforms runs them all.
oldroot:
	./scripts/debroot.sh bullseye

# arm64 (docs/platforms.md): a cached Debian 12 arm64 root
# (~/.cache/heaplens/roots/bookworm-arm64: glibc 2.36, python3.11, gcc with
# libgomp) entered through qemu-user (qemu-user-static, binfmt_misc's
# qemu-aarch64 entry, which scripts/debroot.sh sets up).
armroot:
	./scripts/debroot.sh arm64

test-platforms: deps bin/heaplens wheel oldroot armroot
	$(GO) test -count=1 -v -run 'TestLibraryNeedsGlibc217|TestPreflightPrograms' ./internal/launch
	$(GO) test -count=1 -v -run 'TestReadelfOracle' ./internal/unwind
	$(GO) test -count=1 -timeout 40m -v -run 'TestOldGlibc|TestBinaryNeedsGlibc217|TestAttachContainer|TestARM64' ./test/e2e -platforms

bin/heaplens-static: bin/heaplens
	cp bin/heaplens $@

# The library under ThreadSanitizer, AddressSanitizer+UBSan (built into a test
# harness, test/sanitize) and UBSan (preloaded), and the fork/unwind stress
# tests; all are part of `make test` too.
sanitize: bin/heaplens
	$(GO) test -count=1 -run 'TestSanitize|TestForkWhileUnwinding|TestPythonForkStorm|TestFullRingFilesystem|TestHostileEnvironment' ./test/e2e/

# CPython's own regression tests bare and under heaplens, beyond the slice that
# make test runs: a third, very low rate, and pyenv's CPython 3.8–3.13 too.
test-cpython: deps bin/heaplens
	$(GO) test -count=1 -timeout 150m -v -run TestCPythonSlice ./test/cpython -full

# The wheels, x86-64 and arm64: a static heaplens (no cgo: it runs on any
# glibc), the library, and the Python package with the pytest plugin
# (docs/pytest.md).
PYPKG = python/heaplens
wheel: $(SO) $(ATTACH_SO) bin/heaplens-arm64
	rm -rf $(PYPKG)/_bin $(PYPKG)/_lib && mkdir -p $(PYPKG)/_bin $(PYPKG)/_lib
	CGO_ENABLED=0 $(GO) build -ldflags=-E=github.com/heaplens/heaplens/internal/sigstart.entry -o $(PYPKG)/_bin/heaplens ./cmd/heaplens
	cp $(SO) $(PYPKG)/_lib/
	$(PYPKG)/_bin/heaplens version | sed -e 's/^heaplens //' -e 's/-dev$$/.dev0/' -e 's/.*/__version__ = "&"/' > $(PYPKG)/_version.py
	./scripts/wheel.sh
	./scripts/wheel.sh aarch64

bench: bin/heaplens
	$(GO) run ./bench/cmd/hlbench -no-build

# The demo needs only a C compiler and Go, not the test suite's packages.
demo:
	./scripts/deps.sh demo
	$(MAKE) bin/heaplens
	./scripts/demo.sh

clean:
	rm -rf bin $(SO) $(ATTACH_SO) $(SO_ARM64) dist build $(PYPKG)/_bin $(PYPKG)/_lib $(PYPKG)/_version.py
