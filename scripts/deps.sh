#!/usr/bin/env bash
# Installs what building and testing heaplens needs on a fresh Debian machine
# of this project's kind. Idempotent: it only installs what is missing.
set -euo pipefail

# `deps.sh demo` installs only what `make demo` needs: a C compiler and make.
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have gcc || need+=(gcc)
have make || need+=(make)
if [ "${1:-}" != demo ]; then
	have g++ || need+=(g++)
	have addr2line || need+=(binutils)
	have valgrind || need+=(valgrind)
	have chromium || need+=(chromium) # the HTML report and web UI tests drive headless Chromium
	[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev) # the static-binary test links with -static
	# Thread-pool tests: OpenMP with clang/libomp (OMPT) beside gcc/libgomp, a second
	# libgomp copy made with patchelf, and real pools in Debian's Python packages.
	have clang || need+=(clang)
	[ -e /usr/lib/llvm-14/lib/libomp.so ] || ls /usr/lib/llvm-*/lib/libomp.so >/dev/null 2>&1 || need+=(libomp-dev)
	have patchelf || need+=(patchelf)
	[ -x /usr/bin/time ] || need+=(time) # the RSS tests compare with /usr/bin/time's maxrss
	have debuginfod || need+=(debuginfod) # a local server for the debuginfod client's test
	have nginx || [ -x /usr/sbin/nginx ] || need+=(nginx) # a program that retitles itself and forks workers (issue 42)
	pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed" || need+=("$1"); }
	for p in python3-numpy python3-sklearn python3-numexpr python3-torch libopenblas0-pthread libopenblas0-openmp; do
		pkg "$p"
	done
	for p in libjemalloc-dev libgoogle-perftools-dev libmimalloc-dev; do # programs whose malloc is not glibc's, and ones calling their own APIs (test/e2e/allocators_test.go, allocapi_test.go)
		pkg "$p"
	done
	pkg python3-dev # the pytest plugin test builds a C extension module for /usr/bin/python3
	pkg python3-venv # make wheel builds in a venv; the wheel tests install into fresh ones
	pkg libpython3.11-testsuite # CPython's own regression tests, run bare and under heaplens (test/cpython)
	# Programs nobody here wrote, run bare and under heaplens (test/programs).
	have node || need+=(nodejs)
	have javac || need+=(default-jdk-headless)
	have redis-server || need+=(redis-server)
	have redis-benchmark || need+=(redis-tools)
	have git || need+=(git)
	have sqlite3 || need+=(sqlite3)
	have xz || need+=(xz-utils)
	have cargo || need+=(cargo)
	have strace || need+=(strace) # the java case checks that the JVM takes SIGSEGV bare
	# arm64: the library's cross compiler (make bin/heaplens-arm64, make wheel), and
	# qemu-user with binfmt_misc for the arm64 root (make armroot, make test-platforms).
	have aarch64-linux-gnu-gcc || need+=(gcc-aarch64-linux-gnu)
	pkg libc6-dev-arm64-cross
	pkg qemu-user-static
	pkg binfmt-support
	pkg python3-greenlet # greenlet and gevent switch slices of the C stack: test/e2e/walks_test.go
	pkg python3-gevent
	pkg python3-eventlet
fi

if [ ${#need[@]} -gt 0 ]; then
	echo "deps: installing ${need[*]}" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! have go; then
	echo "deps: Go is required (https://go.dev/dl); this machine kind ships it in /usr/local/go" >&2
	exit 1
fi
go mod download

if [ "${1:-}" != demo ]; then
	# The Rust program of test/programs and its crate from crates.io, built
	# outside the clone so that later runs only check it.
	cache="${XDG_CACHE_HOME:-$HOME/.cache}/heaplens/test-programs"
	CARGO_HOME="$cache/cargo" cargo fetch --locked --quiet --manifest-path "$(dirname "$0")/../test/workloads/programs/rustalloc/Cargo.toml"
fi
