"""Comments and docs tell the truth, and the repository stands alone."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

import fusionworker.runtime.heartbeat
from fusionworker.core.config import Settings
from fusionworker.core.groups import describe_busy_groups
from fusionworker.exceptions import Retry
from fusionworker.ops.demo import flaky_webhook

ROOT = Path(__file__).resolve().parent.parent


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    files = [ROOT / p for p in out if p.endswith((".py", ".md", ".lua", ".cfg", ".toml",
                                                  ".service", ".txt", ".env"))]
    return [f for f in files if f.exists() and f.name != Path(__file__).name]


def test_no_reference_outside_the_repository():
    outside = ("DESIGN" + ".md", "../" + "shared")
    bad = [f"{f.relative_to(ROOT)}: {needle}" for f in tracked_text_files()
           for needle in outside if needle in f.read_text(errors="replace")]
    assert bad == []


def test_every_numbered_invariant_the_code_names_is_in_design_md():
    design = (ROOT / "docs" / "design.md").read_text()
    section = design.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    listed = {int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.M)}
    assert listed == set(range(1, 9))
    named = set()
    for f in tracked_text_files():
        named |= {int(n) for n in re.findall(r"[Ii]nvariant (\d+)", f.read_text(errors="replace"))}
    assert named and named <= listed


def test_worker_docstring_states_the_real_default_lease():
    lease = Settings().lease
    stated = re.findall(r"lease \(default (\d+) s",
                        fusionworker.runtime.heartbeat.__doc__ or "")
    assert stated == [f"{lease:.0f}"]


def test_flaky_webhook_fails_at_random_as_its_docstring_says():
    assert "at random" in flaky_webhook.__doc__ and "first time" not in flaky_webhook.__doc__
    random.seed(12)
    outcomes = []
    for _ in range(200):
        try:
            flaky_webhook("https://x.example")
            outcomes.append("ok")
        except Retry:
            outcomes.append("retry")
    assert "ok" in outcomes and "retry" in outcomes[outcomes.index("ok"):]   # not just once


def test_readme_says_when_the_embedded_redis_starts():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "when none answers at `REDIS_URL`" not in readme
    assert "an explicit `REDIS_URL` that does not answer is never silently replaced" in readme
    assert "a `worker` says so and waits for it" in readme


@pytest.mark.parametrize("limit", [1, 2])
def test_busy_groups_are_listed_most_waiting_first(queue, r, settings, limit):
    q = queue()
    for group, n in (("a", 1), ("b", 3), ("c", 2)):      # by name != by backlog
        for _ in range(n + 1):                          # one holds, n wait
            q.enqueue("tests.jobs:noop", group=group)
    got = [(g.group, g.waiting) for g in describe_busy_groups(r, settings.prefix, q.name,
                                                              limit=limit)]
    assert got == [("b", 3), ("c", 2)][:limit]


def test_the_readme_shows_the_test_commands_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line for line in ci.splitlines() if line.startswith("python3 -m pytest")]
    assert commands, "no pytest command in .ci/run"
    readme = (ROOT / "README.md").read_text()
    assert [c for c in commands if c not in readme] == []


#: a file path in the docs, a docstring or a comment: ``fusionworker/core/keys.py``,
#: ``tests/runtime/``, a path inside the package (``runtime/loop.py``) or a script
#: (``claim.lua``)
_PATH = re.compile(r"(?<![\w./-])((?:fusionworker|tests|bench|docs|examples)/[\w./-]*\w"
                   r"|(?:core|runtime|middleware|events|ops|web|cli)/[\w/-]+\.(?:py|lua|md)"
                   r"|[\w-]+\.lua)\b")

#: references to files that are gone, each left where another change rewrites its file
#: (none today)
KNOWN_STALE_PATHS: set[tuple[str, str]] = set()


def named_paths() -> set[tuple[str, str]]:
    """(file, path) for every file path a tracked file names that does not exist, read
    from the repository root, the package or the scripts' folder. RQ's own test files
    (``tests/test_*.py`` named by the RQ comparison) and the changelog (history) are
    not ours to check."""
    missing: set[tuple[str, str]] = set()
    for f in tracked_text_files():
        rel = str(f.relative_to(ROOT))
        if rel == "CHANGELOG.md" or not rel.endswith((".py", ".md", ".lua")):
            continue
        rq_side = rel == "docs/from-rq.md" or rel.startswith("tests/compat/")
        for match in _PATH.finditer(f.read_text(errors="replace")):
            ref = match.group(1).rstrip(".")
            if rq_side and ref.startswith("tests/test_"):
                continue
            places = (ROOT / ref, ROOT / "fusionworker" / ref,
                      ROOT / "fusionworker" / "core" / "scripts" / ref)
            if not any(p.exists() or p.with_suffix(".py").exists() for p in places):
                missing.add((rel, ref))
    return missing


def test_every_file_path_named_in_the_docs_and_the_comments_exists():
    missing = named_paths()
    assert missing - KNOWN_STALE_PATHS == set(), "paths that do not exist (moved? renamed?)"
    assert KNOWN_STALE_PATHS - missing == set(), "fixed: drop it from KNOWN_STALE_PATHS"


#: a pointer from the code into the design notes: ``docs/design.md, "Layers"``,
#: ``design.md ("Stopping a running job")``, spread over comment lines or not
_DESIGN_POINTER = re.compile(r"design\.md,?\s*\(?\s*(?:\"([^\"]+)\"|'([^']+)')")


def design_titles() -> set[str]:
    """The headings of docs/design.md and its bold paragraph titles (``**Waiting
    for a job**``), lower-cased, without trailing punctuation."""
    text = (ROOT / "docs" / "design.md").read_text()
    titles = re.findall(r"^#+\s+(.+)$", text, re.M) + re.findall(r"\*\*([^*]+)\*\*", text)
    return {t.strip().rstrip(".:").lower() for t in titles}


def design_pointers(text: str) -> list[str]:
    """The section names ``text`` points to in design.md, its comment markers and line
    breaks folded into spaces."""
    flat = re.sub(r"\s*\n\s*(?:#:?|--)?\s*", " ", text)
    return [" ".join((a or b).split()) for a, b in _DESIGN_POINTER.findall(flat)]


def test_every_design_section_the_code_points_to_exists():
    titles = design_titles()
    pointers = [(str(f.relative_to(ROOT)), name)
                for f in (ROOT / "fusionworker").rglob("*") if f.suffix in (".py", ".lua")
                for name in design_pointers(f.read_text())]
    assert len(pointers) >= 8, pointers      # the scan finds the code's pointers
    assert [(f, n) for f, n in pointers if n.rstrip(".:").lower() not in titles] == []
    # a pointer spread over two comment lines is read whole; a wrong one is found
    assert design_pointers('(docs/design.md, "Decoding what\n    # Redis holds")') == [
        "Decoding what Redis holds"]
    assert "no such section" not in titles
