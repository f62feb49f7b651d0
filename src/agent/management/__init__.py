"""The AMQP management agent (AMQP Management draft 9, as Qpid Dispatch 1.x speaks it).

One module per concern:

* ``protocol``   request parsing, status codes and response messages (no router state);
* ``schemaops``  GET-TYPES / GET-ATTRIBUTES / GET-OPERATIONS / GET-ANNOTATIONS / GET-SCHEMA;
* ``store``      the configuration entities known to the agent and CREATE/UPDATE validation;
* ``entities``   the management view of one core snapshot (router, links, addresses, ...);
* ``operations`` the operations themselves: one request + one view -> a response or a change;
* ``agent``      the IPC adapter: internal connection, links, credit, pending requests.

Only ``agent`` talks IPC; nothing here imports zmq or router_io.
"""
