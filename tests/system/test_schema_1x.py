"""GET-SCHEMA and GET-JSON-SCHEMA of our router against a real Qpid Dispatch 1.x's.

Runs only when ``QDROUTERD_1X`` names a 1.x installation prefix (see test_mixed_1x.py); skipped
otherwise, saying why. Both routers run as real processes on loopback; the documents are read
with a real proton client.

The model must be 1.19's (type keys, attributes and their order, types, defaults, flags,
operations); the descriptions are this router's own words, so none may be 1.19's sentence;
what this router adds sits in the ``qdrouterExtension`` key only.
"""
from __future__ import annotations

import json
import textwrap

from proton import Message
from proton.utils import BlockingConnection, SyncRequestResponse

from conftest import START_TIMEOUT, free_port
from test_mixed_1x import OneXProcess, pytestmark  # noqa: F401 - the same skip

NODE = {"type": "org.amqp.management", "name": "self"}


def _plain(value):
    """proton's typed values (int32, symbol...) as plain JSON values."""
    return json.loads(json.dumps(value, default=str))


def _ask(port: int, operation: str, **props):
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=30)
    try:
        reply = SyncRequestResponse(conn, "$management").call(
            Message(properties={**NODE, "operation": operation, **props}, body={}))
        assert reply.properties["statusCode"] == 200, reply.properties
        return reply.body
    finally:
        conn.close()


def _one_x(tmp_path):
    port = free_port()
    conf = tmp_path / "qdrouterd-1x.conf"
    conf.write_text(textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Router.X
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """))
    proc = OneXProcess(conf)
    proc.wait_for_line("Operational", timeout=START_TIMEOUT)
    return proc, port


def _without_descriptions(document: dict) -> dict:
    out = json.loads(json.dumps(document))
    for etype in out["entityTypes"].values():
        etype.pop("description", None)
        for attribute in etype["attributes"].values():
            attribute.pop("description", None)
    return out


def test_schema_is_1_19s_model_in_our_words(router, tmp_path):
    proc, port = _one_x(tmp_path)
    try:
        theirs = _plain(_ask(port, "GET-SCHEMA"))
        theirs_json = _ask(port, "GET-JSON-SCHEMA")
    finally:
        proc.stop()
    ours = _plain(_ask(router.port, "GET-SCHEMA"))
    extension = ours.pop("qdrouterExtension")
    assert list(ours) == list(theirs)
    assert _without_descriptions(ours) == _without_descriptions(theirs)
    for key, etype in theirs["entityTypes"].items():
        mine = ours["entityTypes"][key]
        if etype.get("description"):
            assert mine["description"] != etype["description"], key
        for name, attribute in etype["attributes"].items():
            if attribute.get("description"):
                assert mine["attributes"][name].get("description") != attribute["description"], \
                    (key, name)
    for key, extra in extension["entityTypes"].items():
        assert not set(extra["attributes"]) & set(theirs["entityTypes"][key]["attributes"])
    # GET-JSON-SCHEMA: the same document as one line of JSON, as 1.19's
    ours_json = _ask(router.port, "GET-JSON-SCHEMA")
    assert "\n" not in ours_json and "\n" not in theirs_json
    assert json.loads(ours_json) == {**ours, "qdrouterExtension": extension}
