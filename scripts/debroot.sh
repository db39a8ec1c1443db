#!/usr/bin/env bash
# Creates, once, a Debian root for the tests that run heaplens inside one
# (test/testenv.Chroot), cached outside the clone like Go's module cache:
# ~/.cache/heaplens/roots/NAME (XDG_CACHE_HOME honoured).
#
#   debroot.sh sid       a sid root with the CPython versions newer than the
#                        machine's (python3.14, python3.15): make sidroot
#   debroot.sh bullseye  a Debian 11 root (glibc 2.31, python3.9, 32-bit and
#                        musl compilers) for the older-glibc tests: make oldroot
#   debroot.sh arm64     a Debian 12 arm64 root (glibc 2.36, python3.11), run
#                        through qemu-user (qemu-user-static, binfmt_misc's
#                        qemu-aarch64 entry): make armroot
#
# A root is complete only once its stamp file exists. A run that died after
# debootstrap finished goes on from there; one that died during it starts again.
# A root made with an older package list gets the packages added in place.
set -euo pipefail

kind="${1:?usage: debroot.sh sid|bullseye|arm64 [DIR]}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}"
# The stamp text changes with the package list, so that cached roots are rebuilt.
case "$kind" in
sid)
	name=sid-py suite=sid
	stamp_text="heaplens sid root v4: python3.14 python3.15 gcc venv numpy openblas sklearn numexpr pytest libomp testsuite"
	# gcc builds the tests' C extension modules against each interpreter;
	# venv, numpy and pytest run the pytest plugin's sample project; numpy
	# over OpenBLAS (its pthread and OpenMP builds), scikit-learn (OpenMP),
	# numexpr (its own pool) and libomp5 run the pool tests; the test suites
	# are test/cpython's.
	pkgs=(python3.14 python3.14-dev python3.14-venv python3.15 python3.15-dev python3.15-venv gcc libc6-dev
		python3-numpy libopenblas0-pthread libopenblas0-openmp python3-sklearn python3-numexpr python3-pytest libomp5
		libpython3.14-testsuite libpython3.15-testsuite)
	;;
bullseye)
	name=bullseye suite=bullseye
	stamp_text="heaplens bullseye root v1: python3 pip venv gcc multilib musl"
	# pip installs the wheel; gcc builds the known-answer programs; gcc-multilib
	# and musl-tools build the programs the library cannot load into.
	pkgs=(python3 python3-pip python3-venv gcc libc6-dev gcc-multilib musl-tools)
	;;
arm64)
	name=bookworm-arm64 suite=bookworm arch=arm64
	stamp_text="heaplens arm64 root v1: python3 pip venv dev gcc"
	# python3-dev builds the tests' C extension modules; gcc brings libgomp.
	pkgs=(python3 python3-pip python3-venv python3-dev gcc libc6-dev)
	;;
*)
	echo "debroot: unknown root $kind" >&2
	exit 2
	;;
esac
root="${2:-$cache/heaplens/roots/$name}"
stamp="$root/.heaplens-root"
ready() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ]; }
ready && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "debroot: debootstrap and chroot need root" >&2
	exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

arch_args=()
if [ -n "${arch:-}" ]; then
	arch_args=(--arch="$arch")
	# A foreign root runs through qemu-user: binfmt_misc must know the
	# architecture with the F flag (the emulator opened at registration, so
	# that it is found inside a chroot), as Debian's qemu-user-static sets it.
	if [ ! -x /usr/bin/qemu-aarch64-static ] || ! command -v update-binfmts >/dev/null 2>&1; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null
	fi
	[ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
	[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
	if ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 || ! grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
		echo "debroot: binfmt_misc's qemu-aarch64 entry is not enabled with the F flag" >&2
		exit 1
	fi
fi

# The machine's own Debian mirror: the only place packages may come from.
mirror=$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)https?://[^[:space:]]+/debian/?([[:space:]]|$)' \
	/etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
	grep -oE 'https?://[^[:space:]]+' | head -1 || true)
if [ -z "$mirror" ]; then
	echo "debroot: no Debian mirror in /etc/apt/sources.list*" >&2
	exit 1
fi

# One builder at a time (several clones share the cache): the others wait, then find it ready.
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9
ready && exit 0

tmp="$root.tmp"
if [ -f "$stamp" ]; then
	# An older package list: the tests using the root meanwhile keep it.
	work=$root
	echo "debroot: adding packages to $root" >&2
else
	work=$tmp
	rm -rf "$root"
	if [ ! -f "$tmp/.debootstrap-done" ]; then
		rm -rf "$tmp"
		echo "debroot: debootstrap $suite from $mirror into $tmp (a few minutes)" >&2
		debootstrap --variant=minbase "${arch_args[@]}" "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 || {
			tail -20 "$tmp.log" >&2
			exit 1
		}
		touch "$tmp/.debootstrap-done"
	fi
fi

# Release files may be older than apt's validity window on a snapshot
# mirror; the signature is still checked.
in_root() { chroot "$work" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
apt=(apt-get -qq -o Acquire::Check-Valid-Until=false -o DPkg::Lock::Timeout=1800)
in_root "${apt[@]}" update
in_root "${apt[@]}" install -y --no-install-recommends "${pkgs[@]}" >>"$tmp.log" 2>&1 || {
	tail -20 "$tmp.log" >&2
	exit 1
}
in_root apt-get clean
echo "$stamp_text" >"$work/.heaplens-root"
if [ "$work" = "$tmp" ]; then
	rm -f "$tmp/.debootstrap-done"
	mv "$tmp" "$root"
fi
rm -f "$tmp.log"
echo "debroot: $root ready" >&2
