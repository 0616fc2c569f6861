"""repo_lens.options: an options object is checked by type, and the keyword forms it replaces keep working
for a release with a DeprecationWarning that names it, pointing at the caller's line."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest

from repo_lens.errors import InputError
from repo_lens.options import grouped_keywords, keyword_only, options_or_default


@dataclass(frozen=True, kw_only=True)
class Look:
    width: int = 600
    title: str | None = None


@dataclass(frozen=True, kw_only=True)
class Cut:
    size: int | None = None


@keyword_only(1, ("scale",))
@grouped_keywords("look", Look)
@grouped_keywords("cut", Cut, names={"window": "size"})
def draw(data: list, *, scale: float = 1.0, look: Look | None = None, cut: Cut | None = None) -> tuple:
    look = options_or_default(look, Look, "look")
    cut = options_or_default(cut, Cut, "cut")
    return data, scale, look.width, look.title, cut.size


def test_the_new_form_runs_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert draw([1], scale=2.0, look=Look(width=300), cut=Cut(size=5)) == ([1], 2.0, 300, None, 5)
        assert draw([1]) == ([1], 1.0, 600, None, None)


def test_old_keywords_fill_the_options_objects_and_warn_at_the_callers_line():
    with pytest.warns(DeprecationWarning) as caught:
        assert draw([1], width=300, title="t", window=7) == ([1], 1.0, 300, "t", 7)
    messages = sorted(str(warning.message) for warning in caught)
    assert messages == ["draw(width=..., title=...) is deprecated and goes in the next release; pass "
                        "look=Look(width=..., title=...) instead",
                        "draw(window=...) is deprecated and goes in the next release; pass cut=Cut(size=...) instead"]
    assert {warning.filename for warning in caught} == {__file__}  # the caller, not the decorators


def test_positional_settings_move_to_their_keywords_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"passing scale to draw\(\) by position is deprecated") as caught:
        assert draw([1], 3.0) == ([1], 3.0, 600, None, None)
    assert caught[0].filename == __file__
    with pytest.raises(TypeError, match=r"draw\(\) takes 2 positional arguments at most"):
        draw([1], 3.0, 4.0)
    with pytest.raises(TypeError, match="multiple values for argument 'scale'"):
        draw([1], 3.0, scale=4.0)


def test_an_old_keyword_beside_its_options_object_is_refused():
    with pytest.raises(InputError, match=r"draw: pass width inside look=Look\(...\), not beside it"):
        draw([1], width=3, look=Look())


def test_an_options_object_of_another_type_is_refused_by_name():
    with pytest.raises(InputError, match=r"look must be a Look \(e.g. look=Look\(width=...\)\), not dict"):
        draw([1], look={"width": 3})
    with pytest.raises(InputError, match=r"cut must be a Cut .*not Look"):
        draw([1], cut=Look())
