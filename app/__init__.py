"""flashscope's web app and command line: thin routes over the simulator and the kernels."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("flashscope")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+src"
