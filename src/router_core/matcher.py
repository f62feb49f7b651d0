"""Choose the compiled address matcher (router_core._addrmatch) or its reference (addrmatch.py).

``ROUTER_NO_EXTENSIONS=1`` forces the reference. Callers import AddressRules from here.
"""
import os

if os.environ.get("ROUTER_NO_EXTENSIONS") == "1":
    from router_core.addrmatch import AddressRules, split_words
    IMPLEMENTATION = "python"
else:
    try:
        from router_core._addrmatch import AddressRules, split_words
        IMPLEMENTATION = "cython"
    except ImportError:
        from router_core.addrmatch import AddressRules, split_words
        IMPLEMENTATION = "python"

__all__ = ["AddressRules", "split_words", "IMPLEMENTATION"]
