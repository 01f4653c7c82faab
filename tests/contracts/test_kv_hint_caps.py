"""The KV-hint advertisement (``X-PBKV-KV-Hints``): what servers send, what clients read."""

import pytest

from pbkv_contract.hints import KV_HINT_ACTION_KINDS
from pbkv_contract.kv_hint_caps import Advertised, advertisement, document, parse_advertisement


def test_the_default_advertisement_names_every_understood_type_at_major_1():
    value = advertisement()
    assert value == ("protocols=0.1,1; actions=kv.demote@1,kv.deref@1,kv.evict@1,kv.fetch@1,kv.pin@1,"
                     "kv.prefetch@1,kv.retain@1")
    caps = parse_advertisement(value)
    assert caps.actions == {f"{t}@1" for t in KV_HINT_ACTION_KINDS} and len(caps.actions) == 7
    assert caps.reads("kv.fetch", "1.0") and caps.reads("kv.fetch", "1.7") and not caps.reads("kv.fetch", "2.0")
    assert not caps.reads("kv.share", "1.0")
    assert caps.reads_protocol("0.1") and caps.reads_protocol("1.0") and not caps.reads_protocol("0.2")


def test_a_subset_and_the_json_document_agree():
    value = advertisement(["kv.retain", "kv.evict"])
    assert parse_advertisement(value) == Advertised(["0.1", "1"], ["kv.evict@1", "kv.retain@1"])
    doc = document(["kv.retain", "kv.evict"], effects={"evict": "retired"})
    assert doc["advertisement"] == value and doc["header"] == "X-PBKV-KV-Hints"
    assert doc["actions"] == [{"action_type": "kv.evict", "action_version": "1", "kind": "evict", "effect": "retired"},
                              {"action_type": "kv.retain", "action_version": "1", "kind": "retain"}]
    with pytest.raises(ValueError, match="kv.share"):
        advertisement(["kv.share"])


@pytest.mark.parametrize("value", [None, 7, "", "kv.retain@1", "protocols=0.1", "actions=kv.retain@1",
                                   "protocols=0.1; actions=" + "x" * 3000, "protocols=0.1; actions=@1,kv.evict@"])
def test_anything_else_advertises_nothing(value):
    caps = parse_advertisement(value)
    assert not caps and not caps.reads("kv.evict", "1.0") or not caps.reads_protocol("0.1")


def test_unknown_parts_are_skipped():
    caps = parse_advertisement(" Protocols = 0.1 ; future=x,y; actions = kv.evict@1 , kv.new@3 ")
    assert caps.protocols == {"0.1"} and caps.actions == {"kv.evict@1", "kv.new@3"} and bool(caps)
