# cython: language_level=3, annotation_typing=False, wraparound=True, boundscheck=True
# Address rule matching, compiled. The source is the pure-Python reference
# common/addrmatch.py, included verbatim so the two cannot drift; router_core.matcher selects.
include "common/addrmatch.py"
