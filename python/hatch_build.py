"""Marks the wheel as platform-specific: it holds Linux x86-64 binaries.

make wheel then lets auditwheel replace linux_x86_64 by the manylinux tag
that what the library really links against allows.
"""
from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        build_data["pure_python"] = False
        build_data["tag"] = "py3-none-linux_x86_64"
