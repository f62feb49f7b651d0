"""The SASL guard (frameguard.py): the one import point for both builds.

``guard`` is the compiled ``router_io._frameguard`` (frameguard.py itself compiled in Cython's
pure-Python mode with cython/_frameguard.pxd) unless ``ROUTER_NO_EXTENSIONS=1`` is set or it is
not built, else the reference ``router_io.frameguard``; ``IMPLEMENTATION`` says which. The
FrameError a guard raises is its own module's: catch ``guard.FrameError``.
"""
from common.builds import choose

guard = choose("router_io._frameguard", "router_io.frameguard")
IMPLEMENTATION: str = "cython" if guard.__name__.endswith("._frameguard") else "python"
