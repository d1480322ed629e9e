"""The bench's progress display: a bar redrawn in place on a terminal, summary lines elsewhere."""

from __future__ import annotations

import io

from lemonade_onebit.bench.common import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_draws_a_bar_with_counts_and_time_left():
    out = Terminal()
    progress = Progress(4, out)
    progress.step("base: prompt 1/2")
    progress.step("base: prompt 2/2")
    progress.note("round 1/1 base: done")
    progress.close()
    text = out.getvalue()
    assert "[############............] 2/4" in text
    assert "left  base: prompt 2/2" in text
    assert "\r\x1b[K1bit bench: round 1/1 base: done\n" in text


def test_progress_in_a_pipe_prints_only_the_summary_lines():
    out = io.StringIO()
    progress = Progress(2, out)
    progress.step("base: decode 1/1")
    progress.note("round 1/1 base: done")
    progress.close()
    assert out.getvalue() == "1bit bench: round 1/1 base: done\n"
