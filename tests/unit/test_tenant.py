"""multiTenant address spaces (common/tenant.py): which addresses a tenant's space covers,
as Qpid Dispatch 1.19 decides it (its address iterator's ``_local/``, ``_topo/`` and
``_edge/`` forms are never given the vhost)."""
from hypothesis import given, strategies as st

from common.tenant import tenant_address
from router_core.addressing import normalize


def test_mobile_addresses_go_into_the_tenants_space():
    assert tenant_address("tenant.a", "orders") == "tenant.a/orders"
    assert tenant_address("tenant.a", "a/b.c") == "tenant.a/a/b.c"


def test_scheme_forms_are_stripped_before_the_space_is_put_in_front():
    assert tenant_address("vh", "amqp:/orders") == "vh/orders"
    assert tenant_address("vh", "amqp://host:5672/orders") == "vh/orders"
    assert tenant_address("vh", "/orders") == "vh/orders"


def test_the_routers_own_address_forms_stay_outside_every_space():
    for address in ("_local/x", "_topo/0/R1/temp.abc", "amqp:/_topo/0/R1/temp.abc",
                    "_topo/all/x", "_edge/E1/x", "/_local/x"):
        assert tenant_address("vh", address) == address


def test_no_space_no_change():
    assert tenant_address("", "orders") == "orders"
    assert tenant_address(None, "orders") == "orders"
    assert tenant_address("vh", None) is None


@given(st.text(alphabet="amqp:/_lotcaedg.xyz", max_size=20))
def test_the_space_goes_in_front_of_what_the_core_routes_on(address):
    text = normalize(address)
    routed = tenant_address("vh", address)
    if text.startswith(("_local/", "_topo/", "_edge/")):
        assert routed == address
    else:
        assert routed == "vh/" + text and normalize(routed) == routed
