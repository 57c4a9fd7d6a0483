"""A Lua error names the line of the script (or of ``_lib.lua``) where it happened,
though every script runs joined with ``_lib.lua``."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from fusionworker.core import scripts


def _line_of(name: str, needle: str) -> int:
    """The 1-based line of ``<name>`` (a file of the scripts package) holding ``needle``."""
    text = resources.files(scripts).joinpath(name).read_text(encoding="utf-8")
    [line] = [i for i, row in enumerate(text.splitlines(), 1) if needle in row]
    return line


def test_an_error_in_a_script_names_its_own_line(queue, r):
    q = queue("lines")
    q.enqueue("tests.jobs:noop", job_id="a")
    jkey = q.qkeys.job("a")
    r.hset(jkey, mapping={"status": "started", "token": "tok"})
    r.delete(q.qkeys.started)
    r.set(q.qkeys.started, "not a zset")    # touch_many's ZADD fails on it
    line = _line_of("touch_many.lua", "redis.call('ZADD'")
    with pytest.raises(redis.ResponseError) as caught:
        q.scripts.touch_many(keys=[q.qkeys.base], args=[30, "a", "tok"])
    assert f"touch_many.lua:{line}" in str(caught.value)
    assert "user_script" not in str(caught.value)

    # in a pipeline the error is Redis's own text: its user_script line is the script's
    pipe = r.pipeline(transaction=False)
    q.scripts.touch_many.queue_by_sha(pipe, [q.qkeys.base], [30, "a", "tok"])
    [answer] = pipe.execute(raise_on_error=False)
    assert isinstance(answer, redis.ResponseError)
    assert re.search(rf"user_script:{line}\b", str(answer)), str(answer)


def test_an_error_in_a_helper_names_its_line_of_lib(queue, r):
    q = queue("lines")
    q.enqueue("tests.jobs:noop", job_id="b")
    r.set(q.qkeys.base + "dependents:b", "not a set")   # notify_dependents' SMEMBERS fails
    line = _line_of("_lib.lua", "redis.call('SMEMBERS'")
    with pytest.raises(redis.ResponseError) as caught:
        q.scripts.cancel(keys=[q.qkeys.base], args=["b", 60])
    assert f"_lib.lua:{line}" in str(caught.value)


def test_explain_maps_chunk_lines():
    last = scripts.script_lines("finish")
    assert scripts.explain("finish", "ERR user_script:3: x") == "ERR finish.lua:3: x"
    assert scripts.explain("finish", f"on @user_script:{last}.") == f"on @finish.lua:{last}."
    assert scripts.explain("finish", f"at user_script:{last + 1 + 7}") == "at _lib.lua:7"
    assert scripts.explain("finish", "WRONGTYPE no place named") == "WRONGTYPE no place named"


def test_the_library_declares_nothing_local_at_its_top():
    """A top-level ``local`` of _lib.lua would be invisible to the script (it runs
    before the library's text): every top-level name is declared by the loader."""
    lib = resources.files(scripts).joinpath("_lib.lua").read_text(encoding="utf-8")
    assert not re.search(r"^local\b", lib, re.M)
    head = scripts.source("claim").split(" local function main()", 1)[0]
    for name in ("now", "hget", "to_failed", "SEQ_LIMIT", "KEY_TYPES"):
        assert re.search(rf"\b{name}\b", head)


def test_a_script_carries_only_the_helpers_it_uses_on_the_library_lines():
    """A helper no script line reaches (directly or through another helper) is left
    out of that script's chunk, as empty lines: the chunk has as many lines as the
    script and the whole library, so ``_lib.lua:L`` still names the helper's line."""
    lib = scripts._lib()[1]     # its text with the names written in
    for name in scripts.NAMES:
        chunk = scripts.source(name)
        tail = chunk.split("\n")[scripts.script_lines(name) + 1:]
        assert len(tail) == len(lib.rstrip("\n").split("\n")) + 3, name
        for kept, line in zip(tail, lib.split("\n")):
            assert kept in ("", line), (name, line)
    touch = scripts.source("touch_many")
    assert "function lease_end(" in touch and "function hmget(" in touch
    assert "function notify_dependents(" not in touch and "function put_event(" not in touch
    # cancel reaches put_event nowhere, but notify_dependents and what it calls
    cancel = scripts.source("cancel")
    assert "function notify_dependents(" in cancel and "function hget(" in cancel
    assert "function put_event(" not in cancel


def test_the_library_formats_numbers_as_the_c_library_would(r):
    """``fmt_int``'s fast path ('%d') writes what '%.0f' writes, for every kind of
    number it may meet (whole or not, either side of 2^53, zero of either sign), and
    ``fmt_time`` keeps its last answer only for the same time."""
    local, lib = scripts._lib()
    values = [0, 1, -1, 7, 2 ** 42, -(2 ** 42) * 5 - 3, 2 ** 53 - 1, 2 ** 53, -(2 ** 53),
              2 ** 53 + 2, 1e20, -1e20, 0.5, 1.5, 2.5, -2.5, 1e-9, 123456789012.75]
    got = r.eval(
        f"{local}\n{lib}\nlocal out = {{}}\n"
        "for i = 1, #ARGV do\n"
        "  local n = tonumber(ARGV[i])\n"
        "  out[#out + 1] = fmt_int(n) .. ' ' .. string.format('%.0f', n)\n"
        "end\n"
        "local z = 1 / (-1 / 0)\n"      # -0, at run time
        "out[#out + 1] = fmt_int(z) .. ' ' .. string.format('%.0f', z)\n"
        "out[#out + 1] = fmt_time(10.25) .. ' ' .. fmt_time(10.5) .. ' ' .. fmt_time(10.25)\n"
        "return out", 0, *[repr(float(v)) for v in values])
    for line in got[:-1]:
        fast, slow = line.split(" ")
        assert fast == slow, line
    assert got[-1] == "10.250000 10.500000 10.250000"
