# cython: language_level=3, annotation_typing=False, wraparound=True, boundscheck=True
# The worker's proton engine adapter, compiled. The source is the pure-Python reference
# router_io/engine.py, included verbatim (so the two cannot drift); compiling it removes the
# interpreter's per-call overhead on the per-delivery paths. Select with router_io.select.
include "router_io/engine.py"
