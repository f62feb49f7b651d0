"""What this router calls itself: product name and the version it implements.

One place for the names every process shows: ``qdrouterd --version`` (supervisor), the
management agent's router entity and the AMQP open's ``product``/``version`` properties the
workers send. Plain constants; must not import anything of the router's packages.
"""

PRODUCT = "qpid-dispatch-router"
VERSION = "1.19.0"  # the Qpid Dispatch release this router is a drop-in replacement for
# this package's own version (pyproject.toml reads it from here: one place, and the router
# need not load importlib.metadata and its e-mail parser to log it)
BUILD_VERSION = "0.1.0"
