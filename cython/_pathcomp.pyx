# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Route computation for the interior routing protocol: the compiled build of ``router_core.pathcomp``.

Same API, same rules and an equal ``Routes`` result as the pure-Python reference
``src/router_core/pathcomp.py`` (read its docstring for the graph, stand-in and tie rules); the
types (``Routes``, ``MAX_LINK_COST``) are imported from there. Callers pick a build through
``router_core.pathcomp_select``. Sans-I/O; imports nothing of the router but ``router_core.pathcomp``
and must not import zmq, proton or sockets.

How it is fast: router ids are mapped once to ints in sorted-id order, so comparing indices is
comparing ids (the tie rule needs nothing else); edges go into CSR arrays; each Dijkstra run uses
an indexed binary heap with decrease-key ordered by ``(cost, index)`` over C arrays. All N runs
for valid origins happen in one ``nogil`` block reusing the same buffers and collect
(destination, origin) pairs in a C array, turned into Python lists once at the end. Work is
O(N · E log N) with no Python object touched inside a run.
"""
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc, realloc

from router_core.pathcomp import MAX_LINK_COST, Routes

IMPLEMENTATION = "cython"

cdef enum:
    UNSEEN = 0
    QUEUED = 1
    SETTLED = 2


cdef struct HeapEntry:
    int64_t dist          # a copy of the node's cost, so comparisons stay inside the heap array
    int32_t node


cdef struct Workspace:
    int32_t n
    # CSR adjacency: the out-edges of node u are targets/weights[offsets[u]:offsets[u + 1]]
    int32_t *offsets
    int32_t *targets
    int64_t *weights
    # one Dijkstra run
    int64_t *dist
    int32_t *parent
    int32_t *order        # settle order; order[0] is the root
    HeapEntry *heap
    int32_t *heap_pos
    char *state
    char *through_me
    # valid origins, as (destination, origin) pairs in origin order
    int32_t *pairs
    Py_ssize_t n_pairs
    Py_ssize_t pairs_capacity


cdef inline bint _before(HeapEntry a, HeapEntry b) noexcept nogil:
    """Heap order: (cost, id index)."""
    return a.dist < b.dist or (a.dist == b.dist and a.node < b.node)


cdef inline void _sift_up(Workspace *w, int32_t i) noexcept nogil:
    cdef HeapEntry entry = w.heap[i]
    cdef int32_t up
    while i > 0:
        up = (i - 1) >> 1
        if not _before(entry, w.heap[up]):
            break
        w.heap[i] = w.heap[up]
        w.heap_pos[w.heap[i].node] = i
        i = up
    w.heap[i] = entry
    w.heap_pos[entry.node] = i


cdef inline void _sift_down(Workspace *w, int32_t i, int32_t size) noexcept nogil:
    cdef HeapEntry entry = w.heap[i]
    cdef int32_t child
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _before(w.heap[child + 1], w.heap[child]):
            child += 1
        if not _before(w.heap[child], entry):
            break
        w.heap[i] = w.heap[child]
        w.heap_pos[w.heap[i].node] = i
        i = child
    w.heap[i] = entry
    w.heap_pos[entry.node] = i


cdef int32_t _dijkstra(Workspace *w, int32_t root) noexcept nogil:
    """Shortest-path tree from root into w.dist/parent/order; returns how many nodes it settled."""
    cdef int32_t size, settled = 0, u, v, e, i
    cdef int64_t alt
    for i in range(w.n):
        w.state[i] = UNSEEN
    w.dist[root] = 0
    w.parent[root] = -1
    w.state[root] = QUEUED
    w.heap[0].dist = 0
    w.heap[0].node = root
    w.heap_pos[root] = 0
    size = 1
    while size > 0:
        u = w.heap[0].node
        size -= 1
        if size > 0:
            w.heap[0] = w.heap[size]
            _sift_down(w, 0, size)
        w.state[u] = SETTLED
        w.order[settled] = u
        settled += 1
        for e in range(w.offsets[u], w.offsets[u + 1]):
            v = w.targets[e]
            if w.state[v] == SETTLED:
                continue
            alt = w.dist[u] + w.weights[e]
            if w.state[v] == UNSEEN:
                w.dist[v] = alt
                w.parent[v] = u
                w.state[v] = QUEUED
                w.heap[size].dist = alt
                w.heap[size].node = v
                _sift_up(w, size)
                size += 1
            elif alt < w.dist[v]:
                w.dist[v] = alt
                w.parent[v] = u
                w.heap[w.heap_pos[v]].dist = alt
                _sift_up(w, w.heap_pos[v])
            elif alt == w.dist[v] and u < w.parent[v]:
                w.parent[v] = u       # equal cost: the lower predecessor id wins
    return settled


cdef bint _valid_origins(Workspace *w, int32_t me) noexcept nogil:
    """Every other router's tree; my subtree in it gives (destination, origin) pairs. 0 on ENOMEM."""
    cdef int32_t origin, settled, k, v
    cdef int32_t *grown
    for origin in range(w.n):
        if origin == me:
            continue
        settled = _dijkstra(w, origin)
        if w.state[me] != SETTLED:
            continue
        w.through_me[origin] = 0
        for k in range(1, settled):
            v = w.order[k]
            w.through_me[v] = v == me or w.through_me[w.parent[v]]
            if w.through_me[v] and v != me:
                if w.n_pairs + 2 > w.pairs_capacity:
                    grown = <int32_t *>realloc(w.pairs, 2 * w.pairs_capacity * sizeof(int32_t))
                    if not grown:
                        return 0
                    w.pairs = grown
                    w.pairs_capacity *= 2
                w.pairs[w.n_pairs] = v
                w.pairs[w.n_pairs + 1] = origin
                w.n_pairs += 2
    return 1


cdef void _free(Workspace *w) noexcept:
    free(w.offsets); free(w.targets); free(w.weights); free(w.dist); free(w.parent)
    free(w.order); free(w.heap); free(w.heap_pos); free(w.state); free(w.through_me)
    free(w.pairs)


def compute_routes(my_id, link_states):
    """Next hop, cost, radius and valid origins from ``my_id`` (see ``router_core.pathcomp``)."""
    cdef Workspace w
    cdef Py_ssize_t n_edges = 0
    cdef int32_t n, me, u, v, i, k, settled
    cdef bint ok
    cdef Py_ssize_t p
    cdef int32_t *hops
    cdef int32_t *first_hop
    cdef int32_t radius = 0

    # Validate and index exactly as the reference does (same errors, same stand-ins).
    names = {my_id}
    edge_list = []
    for router, peers in link_states.items():
        names.add(router)
        for peer, cost in peers.items():
            if not isinstance(cost, int):
                raise TypeError(f"link cost {router!r}->{peer!r} is not an int: {cost!r}")
            if not 1 <= cost <= MAX_LINK_COST:
                raise ValueError(f"link cost {router!r}->{peer!r} out of range "
                                 f"1..{MAX_LINK_COST}: {cost}")
            names.add(peer)
            if peer != router:
                edge_list.append((router, peer, cost))
    ids = sorted(names)
    if len(ids) >= 2**31 - 1:
        raise ValueError("too many routers")
    index = {name: i for i, name in enumerate(ids)}
    n = len(ids)
    me = index[my_id]
    n_edges = len(edge_list)

    w.n = n
    w.offsets = <int32_t *>malloc((n + 1) * sizeof(int32_t))
    w.targets = <int32_t *>malloc((n_edges + 1) * sizeof(int32_t))
    w.weights = <int64_t *>malloc((n_edges + 1) * sizeof(int64_t))
    w.dist = <int64_t *>malloc(n * sizeof(int64_t))
    w.parent = <int32_t *>malloc(n * sizeof(int32_t))
    w.order = <int32_t *>malloc(n * sizeof(int32_t))
    w.heap = <HeapEntry *>malloc(n * sizeof(HeapEntry))
    w.heap_pos = <int32_t *>malloc(n * sizeof(int32_t))
    w.state = <char *>malloc(n * sizeof(char))
    w.through_me = <char *>malloc(n * sizeof(char))
    w.pairs_capacity = 2 * n + 2
    w.n_pairs = 0
    w.pairs = <int32_t *>malloc(w.pairs_capacity * sizeof(int32_t))
    hops = <int32_t *>malloc(n * sizeof(int32_t))
    first_hop = <int32_t *>malloc(n * sizeof(int32_t))
    try:
        if (not w.offsets or not w.targets or not w.weights or not w.dist or not w.parent
                or not w.order or not w.heap or not w.heap_pos or not w.state
                or not w.through_me or not w.pairs or not hops or not first_hop):
            raise MemoryError()

        # CSR by counting sort on the source; a repeated edge cannot occur (peers is a dict).
        for i in range(n + 1):
            w.offsets[i] = 0
        for router, peer, cost in edge_list:
            w.offsets[<int32_t>index[router] + 1] += 1
        for i in range(n):
            w.offsets[i + 1] += w.offsets[i]
        for i in range(n):
            hops[i] = w.offsets[i]        # borrowed as the fill cursor
        for router, peer, cost in edge_list:
            u = index[router]
            w.targets[hops[u]] = index[peer]
            w.weights[hops[u]] = cost
            hops[u] += 1

        # My tree: cost, next hop and hop count, filled in settle order (parents first).
        with nogil:
            settled = _dijkstra(&w, me)
            hops[me] = 0
            for k in range(1, settled):
                v = w.order[k]
                u = w.parent[v]
                hops[v] = hops[u] + 1
                if hops[v] > radius:
                    radius = hops[v]
                first_hop[v] = v if u == me else first_hop[u]
        next_hop = {}
        cost_to = {}
        valid_origins = {}
        for v in range(n):
            if v != me and w.state[v] == SETTLED:
                name = ids[v]
                next_hop[name] = ids[first_hop[v]]
                cost_to[name] = w.dist[v]
                valid_origins[name] = []

        with nogil:
            ok = _valid_origins(&w, me)
        if not ok:
            raise MemoryError()
        for p in range(0, w.n_pairs, 2):
            valid_origins[ids[w.pairs[p]]].append(ids[w.pairs[p + 1]])
    finally:
        _free(&w)
        free(hops)
        free(first_hop)

    return Routes(next_hop=next_hop, cost=cost_to, radius=radius, valid_origins=valid_origins)
