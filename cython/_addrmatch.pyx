# cython: language_level=3, annotation_typing=False, wraparound=True, boundscheck=True
# Address rule matching, compiled. The source is the pure-Python reference
# router_core/addrmatch.py, included verbatim so the two cannot drift; router_core.matcher selects.
include "router_core/addrmatch.py"
