"""Command-line tools: ``qdstat`` and ``qdmanage``, AMQP management clients of the router.

They talk to a router only over AMQP (proton's BlockingConnection); they must not import zmq,
router_io or router_core.
"""
