"""Builds the plugin libraries (ep_plugin/build.py) into the package during `pip install .`."""
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
        build_plugin.build(Path(self.build_lib) / "onnxruntime_ep_seamless")


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # platform wheel: the package carries shared libraries
        return True


setup(cmdclass={"build_py": BuildWithPlugin}, distclass=BinaryDistribution)
