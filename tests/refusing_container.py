"""A real AMQP container for tests that refuses the first attaches to each address.

``python tests/refusing_container.py PORT REFUSALS CONTAINER_ID``: listens on 127.0.0.1:PORT;
the first REFUSALS attaches naming an address are refused as a broker refuses a missing queue
(the attach is answered with a null terminus and detached with ``amqp:not-found`` "Node not
found: ADDRESS"); later ones are accepted (messages received are accepted, nothing is sent).
Prints ``ready`` once listening. Runs until killed.
"""
from __future__ import annotations

import sys

from proton import Condition
from proton.handlers import MessagingHandler
from proton.reactor import Container


class Refusing(MessagingHandler):
    def __init__(self, port: int, refusals: int) -> None:
        super().__init__(auto_accept=True)
        self.port = port
        self.left = refusals

    def on_start(self, event) -> None:
        event.container.listen(f"127.0.0.1:{self.port}")
        print("ready", flush=True)

    def on_link_remote_open(self, event) -> None:
        # (before MessagingHandler's own handlers, which would open the link again after
        # on_link_opening and so undo a close)
        link = event.link
        if not link.state & link.LOCAL_UNINIT:
            return
        terminus = link.remote_target if link.is_receiver else link.remote_source
        address = terminus.address
        if self.left > 0:
            self.left -= 1
            link.condition = Condition("amqp:not-found", f"Node not found: {address}")
            link.open()  # with null termini: the refusal a broker sends
            link.close()
            return
        if link.is_receiver:
            link.target.address = address
            link.flow(10)
        else:
            link.source.address = address
        link.open()


if __name__ == "__main__":
    Container(Refusing(int(sys.argv[1]), int(sys.argv[2])),
              container_id=sys.argv[3] if len(sys.argv) > 3 else "refusing").run()
