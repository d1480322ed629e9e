"""The bench's progress display: a tqdm bar redrawn in place on a terminal, summary lines
elsewhere."""

from __future__ import annotations

import io
import re
import time

from lemonade_onebit.bench.common import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_draws_a_bar_with_counts_and_time_left():
    out = Terminal()
    progress = Progress(4, out)
    time.sleep(0.02)  # a measurable step, so the time left is a time and not `?`
    progress.step("base: prompt 1/2")
    progress.step("base: prompt 2/2")
    progress.note("round 1/1 base: done")
    drawn = out.getvalue()
    progress.close()
    text = out.getvalue()
    bar = r"\r *50%\|[^\r]*\| 2/4 \[\d\d:\d\d<\d\d:\d\d, [^\r]*base: prompt 2/2\]"  # elapsed<left
    assert re.search(bar, drawn)
    assert "\r1bit bench: round 1/1 base: done\n" in drawn  # the bar is wiped before the line
    assert drawn.endswith("base: prompt 2/2]")  # and drawn again under it
    wiped = text[len(drawn):]  # close blanks the bar and returns to the line's start
    assert wiped.endswith("\r") and wiped.strip(" \r") == ""


def test_progress_in_a_pipe_prints_only_the_summary_lines():
    out = io.StringIO()
    progress = Progress(2, out)
    progress.step("base: decode 1/1")
    progress.note("round 1/1 base: done")
    progress.close()
    assert out.getvalue() == "1bit bench: round 1/1 base: done\n"
