"""Marks the wheel as platform-specific: it holds Linux binaries, x86-64 or
(HEAPLENS_WHEEL_ARCH=aarch64, as make wheel sets it for the second wheel)
arm64.

make wheel then lets auditwheel replace linux_ARCH by the manylinux tag
that what the library really links against allows.
"""
import os

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        arch = os.environ.get("HEAPLENS_WHEEL_ARCH", "x86_64")
        if arch not in ("x86_64", "aarch64"):
            raise ValueError("HEAPLENS_WHEEL_ARCH must be x86_64 or aarch64, not %r" % arch)
        build_data["pure_python"] = False
        build_data["tag"] = "py3-none-linux_" + arch
