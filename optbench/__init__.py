"""optbench: how easy is a vision model to optimize? (Xiao et al. 2021, extended to DHVT)."""

__version__ = "0.1.0"
