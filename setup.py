"""Builds the plugin libraries (ep_plugin/build_plugin.py) into the package during `pip install .`.

SEAMLESS_VARIANTS=cpu (comma-separated) limits the build to those variants; wheels/build.sh uses it
for the CPU distribution. Default: every variant build_plugin knows.
"""
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

sys.path.insert(0, str(Path(__file__).resolve().parent / "ep_plugin"))


class BuildWithPlugin(build_py):
    def run(self):
        super().run()
        import build_plugin
        variants = os.environ.get("SEAMLESS_VARIANTS", "")
        variants = tuple(v.strip() for v in variants.split(",") if v.strip()) or build_plugin.VARIANTS
        unknown = set(variants) - set(build_plugin.VARIANTS)
        if unknown:
            raise SystemExit(f"SEAMLESS_VARIANTS: unknown {sorted(unknown)}; known: {list(build_plugin.VARIANTS)}")
        build_plugin.build(Path(self.build_lib) / "onnxruntime_ep_seamless", variants)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # platform wheel: the package carries shared libraries
        return True


setup(cmdclass={"build_py": BuildWithPlugin}, distclass=BinaryDistribution)
