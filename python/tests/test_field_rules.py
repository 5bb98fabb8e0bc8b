"""One rule per field through the Python package, as on HTTP and MCP
(``memgate_core::fields``): control characters in a memory's text or kind
and a search kind over 128 characters are refused with the field and the
rule named, and what was stored before is intact."""

from __future__ import annotations

import pytest

from memgate.deerflow import LocalMemoryManager

KEPT = "the harbour office opens at nine"


@pytest.mark.parametrize(
    ("save", "message"),
    [
        (("fa\x00ct about the harbour", "fact"), "invalid text: must not contain control characters other than tab and line breaks (found U+0000)"),
        (("a plain harbour fact", "fa\x00ct"), "invalid kind: must not contain control characters (found U+0000)"),
        (("a plain harbour fact", "k" * 129), "invalid kind: must be at most 128 characters (got 129)"),
        (None, "invalid kind: must be at most 128 characters (got 1048576)"),
    ],
)
def test_each_field_rule_is_refused_by_name_and_stored_data_stays(tmp_path, save, message):
    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    try:
        m.create_fact(KEPT, category="fact")
        with pytest.raises(ValueError) as refused:
            if save is None:
                m.search("harbour", category="k" * (1 << 20))
            else:
                m.create_fact(save[0], category=save[1])
        assert str(refused.value) == message
        assert [h["content"] for h in m.search("harbour")] == [KEPT]
    finally:
        m.close()


@pytest.mark.parametrize(
    ("distill", "message"),
    [
        ({"enabled": True, "model": "m"}, "backend_config.distill.base_url"),
        ({"budget": 3}, "backend_config.distill.budget is not a distill setting"),
    ],
)
def test_a_bad_distill_section_stops_the_manager_naming_the_key(tmp_path, distill, message):
    """DeerFlow's `backend_config.distill` is memgate's `memory.distill`,
    validated by memgate: the error names the key as the host spells it,
    and the store opened before with the same path is intact."""
    m = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    m.create_fact(KEPT, category="fact")
    m.close()
    with pytest.raises(ValueError) as refused:
        LocalMemoryManager.from_config({"storage_path": str(tmp_path), "distill": distill})
    assert message in str(refused.value)
    assert "memory.distill" not in str(refused.value)
    reopened = LocalMemoryManager.from_config({"storage_path": str(tmp_path)})
    try:
        assert [h["content"] for h in reopened.search("harbour")] == [KEPT]
    finally:
        reopened.close()
