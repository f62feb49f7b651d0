"""Choose the compiled address matcher (router_core._addrmatch) or its reference (common/addrmatch.py).

``ROUTER_NO_EXTENSIONS=1`` forces the reference. Callers import AddressRules from here.
"""
from common.builds import choose

_impl = choose("router_core._addrmatch", "common.addrmatch")
AddressRules = _impl.AddressRules
split_words = _impl.split_words
IMPLEMENTATION = "cython" if _impl.__name__.endswith("._addrmatch") else "python"

__all__ = ["AddressRules", "split_words", "IMPLEMENTATION"]
