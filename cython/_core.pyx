# cython: language_level=3
# The compiled router core: the very same source as the pure-Python reference
# (src/router_core/core.py), compiled. Found through setup.py's include_path=["cython", "src"].
include "router_core/core.py"
