"""The router-wide connection count the workers share (router_io/conncount.py)."""
from router_io.conncount import SharedConnectionCount


def test_workers_see_each_others_connections(tmp_path):
    a = SharedConnectionCount(str(tmp_path), 0)
    b = SharedConnectionCount(str(tmp_path), 1)
    try:
        assert a.admit(3) == -1 and b.admit(3) == -1 and a.admit(3) == -1
        assert a.total() == b.total() == 3
        assert b.admit(3) == 3  # full: refused with the router's count
        a.release()
        assert b.admit(3) == -1 and b.total() == 3
        a.release()
        a.release()  # more releases than connections never go below zero
        assert a.total() == 2
    finally:
        a.close()
        b.close()


def test_a_restarted_worker_starts_its_slot_at_zero(tmp_path):
    a = SharedConnectionCount(str(tmp_path), 0)
    b = SharedConnectionCount(str(tmp_path), 1)
    try:
        for _ in range(4):
            assert b.admit(100) == -1
        assert a.total() == 4
        again = SharedConnectionCount(str(tmp_path), 1)  # worker 1's next generation
        assert a.total() == 0 and again.total() == 0
        again.close()
    finally:
        a.close()
        b.close()


def test_a_worker_reads_the_slots_of_the_core_peers_only(tmp_path):
    # admit() runs per accept: it sums the slots of the router's peers (workers 0..n-1 and
    # the agent), not all 512 of the file
    a = SharedConnectionCount(str(tmp_path), 0, peers=3)
    b = SharedConnectionCount(str(tmp_path), 1, peers=3)
    try:
        assert a.admit(10) == -1 and b.admit(10) == -1
        assert a.total() == b.total() == 2
        assert a._used.size == 3 * 8 == b._used.size
    finally:
        a.close()
        b.close()
