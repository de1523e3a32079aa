"""The one version source of tabdp (read by the build backend and by ``tabdp.__version__``)."""

__version__ = "0.1.0"
