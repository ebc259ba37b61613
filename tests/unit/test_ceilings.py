"""Raised ceilings (issue 26): ``Ceilings`` between ``HARD_LIMITS`` and ``ABSOLUTE_CAPS``."""

from __future__ import annotations

import attrs
import pytest

from ragport import Limits, ValidationError
from ragport.domain import ABSOLUTE_CAPS, DEFAULT_CEILINGS, HARD_LIMITS, Ceilings
from ragport.domain.limits import RAISABLE, check_limit

MIB = 1 << 20


def test_a_plain_limits_is_still_held_to_the_hard_ceilings():
    """Without ``ceilings=`` nothing changes: 8 MiB + 1 of parse_bytes is refused by name.

    If this fails, check the default of ``Limits.ceilings`` (DEFAULT_CEILINGS == HARD_LIMITS).
    """
    for name in RAISABLE:
        assert DEFAULT_CEILINGS.of(name) == getattr(HARD_LIMITS, name)
        with pytest.raises(ValidationError) as caught:
            Limits(**{name: getattr(HARD_LIMITS, name) + 1})
        assert caught.value.field == name and caught.value.limit == name


def test_raised_ceilings_let_a_limit_past_the_hard_one():
    """``Limits(ceilings=Ceilings(parse_bytes=16 MiB), parse_bytes=16 MiB)`` holds; one past
    the raised ceiling is refused naming the field, never clamped.

    If this fails, check ``_validate`` in ragport/domain/limits.py (it must read
    ``instance.ceilings``).
    """
    ceilings = Ceilings(parse_bytes=16 * MIB, parse_ms=400_000, chunks_per_source=16_384)
    limits = Limits(ceilings=ceilings, parse_bytes=16 * MIB, parse_ms=400_000)
    assert (limits.parse_bytes, limits.parse_ms, limits.ceilings) == (16 * MIB, 400_000, ceilings)
    assert ceilings.check("chunks_per_source", 16_384) == 16_384
    assert ceilings.of("top_k") == HARD_LIMITS.top_k  # not raisable: the hard ceiling
    with pytest.raises(ValidationError) as caught:
        Limits(ceilings=ceilings, parse_bytes=16 * MIB + 1)
    assert caught.value.field == "parse_bytes"
    with pytest.raises(ValidationError) as caught:
        attrs.evolve(limits, parse_ms=400_001)
    assert caught.value.field == "parse_ms"


@pytest.mark.parametrize("name", RAISABLE)
def test_a_ceiling_past_its_absolute_cap_is_refused_naming_the_field(name):
    """Each ceiling goes up to ``ABSOLUTE_CAPS`` and not one past it; below the default
    ceiling (a ceiling only raises) and a non-integer are refused too.

    If this fails, check ``_ABSOLUTE`` and ``_check_ceiling`` in ragport/domain/limits.py.
    """
    cap = getattr(ABSOLUTE_CAPS, name)
    assert getattr(Ceilings(**{name: cap}), name) == cap
    # parse_ms: below its former 30 s ceiling (between the two: test_a_ceiling_written_for_...)
    below = 29_999 if name == "parse_ms" else getattr(HARD_LIMITS, name) - 1
    for bad in (cap + 1, below, float(cap), True):
        with pytest.raises(ValidationError) as caught:
            Ceilings(**{name: bad})
        assert caught.value.field == name and caught.value.limit == name


def test_a_ceiling_written_for_the_former_30_s_parse_ms_still_holds_with_a_warning():
    """``Ceilings(parse_ms=120_000)`` raised the 30 s ceiling before parse_ms became CPU time
    with a 300 s default ceiling (issue 43): it still builds, bounding parse_ms at 120 s as it
    did, with a DeprecationWarning; the defaults need no Ceilings at all.

    If this fails, check ``_FORMER_HARD`` and ``_check_ceiling`` in ragport/domain/limits.py.
    """
    assert HARD_LIMITS.parse_ms == 300_000 and DEFAULT_CEILINGS.parse_ms == 300_000
    with pytest.warns(DeprecationWarning):
        old = Ceilings(parse_ms=120_000)
    assert Limits(ceilings=old, parse_ms=120_000).parse_ms == 120_000
    with pytest.raises(ValidationError) as caught:
        Limits(ceilings=old, parse_ms=120_001)
    assert caught.value.field == "parse_ms"
    assert Limits(parse_ms=300_000).parse_ms == 300_000


def test_the_absolute_caps_are_the_documented_ones():
    """256 MiB bytes and characters, 10 minutes, 65,536 pages and chunks, 1 GiB inflated.

    If this fails, update docs/limits.md with the new caps (or restore them).
    """
    assert attrs.asdict(ABSOLUTE_CAPS) == {
        "parse_bytes": 256 * MIB,
        "parse_ms": 600_000,
        "document_chars": 256 * MIB,
        "chunks_per_source": 65_536,
        "pdf_pages": 65_536,
        "inflated_bytes": 1024 * MIB,
    }


def test_ceilings_given_as_a_mapping_are_checked_the_same():
    """``Limits(ceilings={...})`` (what ``attrs.asdict`` gives back) is held to the absolute
    caps; an unknown key or another type is refused naming ``ceilings``.

    If this fails, check ``_to_ceilings`` in ragport/domain/limits.py.
    """
    raised = Limits(ceilings=Ceilings(parse_bytes=16 * MIB), parse_bytes=16 * MIB)
    assert Limits(**attrs.asdict(raised)) == raised
    with pytest.raises(ValidationError) as caught:
        Limits(ceilings={"parse_bytes": 1 << 40})
    assert caught.value.field == "parse_bytes"
    for bad in ({"top_k": 64}, 16 * MIB):
        with pytest.raises(ValidationError) as caught:
            Limits(ceilings=bad)  # type: ignore[arg-type]
        assert caught.value.field == "ceilings"
    assert check_limit("parse_bytes", 16 * MIB, 16 * MIB) == 16 * MIB
