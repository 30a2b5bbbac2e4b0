"""The course: /learn, its lessons, their JSON twin, and the home page's start and order."""

from __future__ import annotations

import re
from html import unescape

import pytest

from flashscope.app import lessons
from flashscope.app.views import VIEWS
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.tracing import build_trace

TRACE_VIEWS = {"/tiles": "fa2", "/backward": "fa2-bwd"}
# The steppers' defaults (static/js/tiles.js and backward.js): what a link leaves out.
STEPPER_DEFAULTS = {
    "/tiles": {"algo": "fa2", "n": 256, "d": 64, "bm": 64, "bn": 64, "causal": 0, "dtype": "fp32"},
    "/backward": {"n": 128, "d": 32, "bm": 32, "bn": 32, "causal": 0, "dtype": "fp32"},
}


def _trace_of(view: str, params: dict):
    p = {**STEPPER_DEFAULTS[view], **params}
    algo = p["algo"] if view == "/tiles" else TRACE_VIEWS[view]
    problem = AttentionProblem(
        seq_q=int(p["n"]), head_dim=int(p["d"]), causal=bool(int(p["causal"])), dtype=p["dtype"]
    )
    return build_trace(algo, problem, TileConfig(int(p["bm"]), int(p["bn"])), 0)


def test_api_learn_lists_the_lessons_in_order_with_their_neighbours(client):
    body = client.get("/api/learn").json()["lessons"]
    ids = [lesson.id for lesson in lessons.LESSONS]
    assert [x["id"] for x in body] == ids
    assert ids[:3] == ["memory-wall", "online-softmax", "tiles"]
    registered = {v.path for v in VIEWS}
    for k, x in enumerate(body):
        assert x["number"] == k + 1
        assert x["previous"] == (ids[k - 1] if k else None)
        assert x["next"] == (ids[k + 1] if k + 1 < len(ids) else None)
        assert x["view"] is None or x["view"] in registered
        assert x["url"].startswith(f"/learn/{x['id']}")
        assert sum(c["correct"] for c in x["check"]["choices"]) == 1
        assert all(c["why"] for c in x["check"]["choices"]) and x["check"]["explanation"]
        assert x["narrative"] and all(len(p) > 80 for p in x["narrative"])
        for t in x["try_this"]:
            assert t["url"].startswith(f"/learn/{x['id']}?")
        assert client.get(f"/api/learn/{x['id']}").json() == x
    assert body[-1]["id"] == "hopper" and body[-1]["view"] == "/hopper"  # the course ends on it
    assert client.get("/api/learn/nope").status_code == 404


@pytest.mark.parametrize("lesson", [x for x in lessons.LESSONS if x.view in TRACE_VIEWS])
def test_try_this_steps_show_the_phase_they_promise(lesson):
    for t in lesson.try_this:
        if t.phase is None:
            continue
        trace = _trace_of(lesson.view, t.params)
        assert trace.event(int(t.params["step"]))["phase"] == t.phase, t.label


def test_the_tiles_lesson_says_what_its_error_readout_shows():
    """'The last key block' drops the error from about 0.3 to fp32 rounding; in fp16 the written
    output sits below the floor u·max|O|."""
    tiles = lessons.lesson_at("tiles")[1]
    by_label = {t.label: t for t in tiles.try_this}
    last = by_label["The last key block"]
    state = _trace_of("/tiles", last.params).event(int(last.params["step"]))["state"]
    before, after = state["err_history"][-2], state["err_history"][-1]
    assert 0.2 < before < 0.4 and after < 2e-6
    fp16 = by_label["The same in fp16"]
    state = _trace_of("/tiles", fp16.params).event(int(fp16.params["step"]))["state"]
    assert state["final"] and state["err_history"][-1] < state["err_floor"]


def test_lesson_pages_render_text_links_check_and_neighbours(client):
    for k, lesson in enumerate(lessons.LESSONS):
        r = client.get(f"/learn/{lesson.id}")
        assert r.status_code == 200
        html = unescape(r.text)
        assert lesson.title in html and lesson.narrative[0] in html
        assert lesson.check.question in html
        assert html.count('name="answer"') == len(lesson.check.choices)
        for t in lesson.try_this:
            assert f'href="{lessons.lesson_url(lesson, t.params)}#figure"' in html
        if k + 1 < len(lessons.LESSONS):
            assert (
                f'rel="next" class="button" href="{lessons.lesson_url(lessons.LESSONS[k + 1])}"'
                in html
            )
        if k:
            assert (
                f'rel="prev" class="button" href="{lessons.lesson_url(lessons.LESSONS[k - 1])}"'
                in html
            )
        assert 'src="/static/js/learn.js"' in html
        for path, _ in lesson.links:  # the last lesson's links lead to views that exist
            assert client.get(path).status_code == 200
    index = unescape(client.get("/learn").text)
    assert all(lessons.lesson_url(x) in index for x in lessons.LESSONS)
    assert client.get("/learn/nope").status_code == 404


def test_home_starts_the_course_and_lists_views_in_the_navigation_order(client):
    html = client.get("/").text
    start = re.search(r'class="button start-button" href="([^"]+)"', html)
    assert start and unescape(start.group(1)) == lessons.lesson_url(lessons.LESSONS[0])
    nav = re.search(r'<nav aria-label="Views">(.*?)</nav>', html, re.S).group(1)
    nav_paths = [p for p in re.findall(r'<a href="(/[^"]*)"', nav) if p != "/"]
    assert nav_paths[0] == "/learn"  # the course comes first
    assert re.search(r'<a href="/learn"\s*>Learn</a>', nav)
    cards = re.search(r'<ul class="view-list">(.*?)</ul>', html, re.S).group(1)
    card_paths = re.findall(r'<li>\s*<a href="([^"]+)"', cards)
    assert [p for p in card_paths if p in nav_paths] == nav_paths
    assert set(nav_paths) <= set(card_paths)
    assert sorted(card_paths) == sorted(v.path for v in VIEWS)
