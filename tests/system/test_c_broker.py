"""The tests' real broker (tests/brokers.py) does what the link-route and auto-link tests rely on:
it queues by address, delivers to a receiver of that address, carries the container-id it was
started with, and a restart empties it. Real proton clients, no router."""
from proton import Message
from proton.utils import BlockingConnection

TIMEOUT = 10


def test_broker_queues_by_address_and_has_its_container_id(c_broker):
    broker = c_broker("broker.A")
    conn = BlockingConnection(f"amqp://{broker.address}", timeout=TIMEOUT)
    try:
        assert conn.conn.remote_container == "broker.A"
        snd = conn.create_sender("queue.x")
        for i in range(3):
            snd.send(Message(body=f"m{i}"))   # blocks until the broker accepted it
        rcv = conn.create_receiver("queue.x", credit=10)
        assert [rcv.receive(timeout=TIMEOUT).body for _ in range(3)] == ["m0", "m1", "m2"]
    finally:
        conn.close()


def test_broker_restart_on_the_same_port(c_broker):
    broker = c_broker("broker.B")
    port = broker.port
    conn = BlockingConnection(f"amqp://{broker.address}", timeout=TIMEOUT)
    conn.create_sender("queue.y").send(Message(body="lost on restart"))
    conn.close()
    broker.restart()
    assert broker.port == port
    conn = BlockingConnection(f"amqp://{broker.address}", timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver("queue.y", credit=1)
        try:
            rcv.receive(timeout=0.5)
            raise AssertionError("a restarted broker kept a message")
        except Exception as exc:  # proton.utils raises Timeout
            assert "Timeout" in type(exc).__name__
    finally:
        conn.close()
