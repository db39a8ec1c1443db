#!/usr/bin/env bash
# Builds, once, CPython 3.14 free-threaded (--disable-gil, "3.14t") from
# Debian's python3.14 source package, inside the sid root (make sidroot), and
# installs it there under /opt/python3.14t (make pyft). It takes minutes, so
# make test does not run it; the free-threaded tests say loudly when it is
# absent (test/testenv.FreeThreaded).
#
# The build is Debian's source with its patches, configured as upstream
# documents for the free-threaded build; only what the tests import is
# needed beyond the core (ctypes: libffi, threads, multiprocessing).
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}"
root="${1:-$cache/heaplens/roots/sid-py}"
prefix=/opt/python3.14t
stamp="$root$prefix/.heaplens-pyft"
stamp_text="heaplens python3.14t v1: debian source, --disable-gil"
ready() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ]; }
ready && exit 0

if [ ! -f "$root/.heaplens-root" ]; then
	echo "pyft: no sid root at $root (make sidroot)" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "pyft: chroot needs root" >&2
	exit 1
fi
exec 9>"$root.pyft.lock"
flock 9
ready && exit 0

in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive "$@"; }
log="$root.pyft.log"
: >"$log"
fail() {
	tail -30 "$log" >&2
	echo "pyft: failed; the whole log is $log" >&2
	exit 1
}
# The source package comes from the same mirror as the root's binaries.
src=/etc/apt/sources.list.d/heaplens-src.list
if [ ! -f "$root$src" ]; then
	sed -n 's/^deb /deb-src /p' "$root/etc/apt/sources.list" >"$root$src"
fi
in_root apt-get -qq -o Acquire::Check-Valid-Until=false update >>"$log" 2>&1 || fail
build=/var/tmp/heaplens-pyft
rm -rf "$root$build"
mkdir -p "$root$build"
# The source first: a mirror that serves binary packages only answers 404.
in_root sh -c "cd $build && apt-get source --download-only -qq python3.14" >>"$log" 2>&1 || {
	tail -5 "$log" >&2
	echo "pyft: !!! the Debian mirror does not serve python3.14's source package: no free-threaded build" >&2
	rm -rf "$root$build"
	exit 1
}
echo "pyft: installing the build's dependencies in $root" >&2
in_root apt-get install -y -qq --no-install-recommends dpkg-dev make gcc libc6-dev libffi-dev zlib1g-dev \
	libbz2-dev liblzma-dev libexpat1-dev >>"$log" 2>&1 || fail
echo "pyft: building python3.14 --disable-gil in $root$build (minutes)" >&2
in_root nice -n 5 sh -c "cd $build && dpkg-source -x python3.14_*.dsc src && cd src &&
	./configure --prefix=$prefix --disable-gil --without-ensurepip --with-system-ffi --with-system-expat &&
	make -j$(nproc) && rm -rf $prefix && make install" >>"$log" 2>&1 || fail
rm -rf "$root$build"
echo "$stamp_text" >"$stamp"
rm -f "$log"
echo "pyft: $root$prefix/bin/python3.14t ready" >&2
