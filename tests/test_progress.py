"""mtl_heads.progress: a tqdm bar on a terminal, plain lines (no carriage return) anywhere else."""
import io

import pytest
from tqdm import tqdm

from mtl_heads import progress
from mtl_heads.progress import BYTES, Display, PlainProgress, hf_bars_off_in_logs, is_terminal, progress_bar, write


class Clock:
    """A fake time source: ``tick(s)`` moves it on by s seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines(stream: io.StringIO) -> list[str]:
    text = stream.getvalue()
    assert "\r" not in text
    return text.splitlines()


def test_a_line_per_tenth_at_most_one_per_interval_and_the_closing_one():
    """100 steps of 1 s, interval 30 s: the 10% marks come every 10 s, so a line is due at 30, 60
    and 90 steps (the first mark passed 30 s after the previous line), then the closing line."""
    clock, out = Clock(), io.StringIO()
    bar = PlainProgress(total=100, desc="epoch 1/2", file=out, display=Display(clock=clock, summary=True))
    for step in range(100):
        clock.tick(1.0)
        bar.set_postfix(task="ner", loss=f"{1 / (step + 1):.3f}")
        bar.update(1)
    bar.close()
    bar.close()  # a second close writes nothing
    got = lines(out)
    assert [line.split("]")[0] for line in got] == [
        "epoch 1/2:  30% 30/100 [00:30<01:10,  1.00it/s, loss=0.033, task=ner",
        "epoch 1/2:  60% 60/100 [01:00<00:40,  1.00it/s, loss=0.017, task=ner",
        "epoch 1/2:  90% 90/100 [01:30<00:10,  1.00it/s, loss=0.011, task=ner",
        "epoch 1/2: 100% 100/100 [01:40<00:00,  1.00it/s, loss=0.010, task=ner"]
    assert bar.lines == 4


def test_fast_marks_wait_for_the_interval_and_slow_ones_are_each_written():
    clock, out = Clock(), io.StringIO()
    bar = PlainProgress(total=10, desc="slow", file=out, display=Display(clock=clock, interval=30.0))
    for _ in range(10):
        clock.tick(40.0)  # each step is a 10% mark and longer than the interval
        bar.update(1)
    assert [line.split(" [")[0] for line in lines(out)] == [f"slow: {10 * k:3d}% {k}/10" for k in range(1, 11)]


def test_a_short_loop_writes_nothing_unless_asked_and_a_long_one_closes_with_a_line():
    clock = Clock()
    quiet, asked, long = io.StringIO(), io.StringIO(), io.StringIO()
    for stream, summary, seconds in ((quiet, False, 0.5), (asked, True, 0.5), (long, False, 40.0)):
        bar = PlainProgress(total=4, desc="dev pos", file=stream, display=Display(clock=clock, summary=summary))
        for _ in range(4):
            clock.tick(seconds / 4)
            bar.update(1)
        bar.close()
    assert lines(quiet) == []
    assert len(lines(asked)) == 1 and lines(asked)[0].startswith("dev pos: 100% 4/4")
    assert [line.split(" [")[0] for line in lines(long)] == ["dev pos:  75% 3/4", "dev pos: 100% 4/4"]
    assert lines(long)[1].startswith("dev pos: 100% 4/4 [00:40<00:00")
    ended = io.StringIO()  # a line due at the very last step: the closing line does not repeat it
    bar = PlainProgress(total=2, desc="d", file=ended, display=Display(clock=clock, summary=True))
    for _ in range(2):
        clock.tick(20.0)
        bar.update(1)
    bar.close()
    assert [line.split(" [")[0] for line in lines(ended)] == ["d: 100% 2/2"]


def test_without_a_total_a_line_per_interval_with_scaled_units():
    clock, out = Clock(), io.StringIO()
    bar = PlainProgress(desc="ud", unit=BYTES, file=out, display=Display(clock=clock))
    for _ in range(70):
        clock.tick(1.0)
        bar.update(1024 * 1024)
    bar.close()
    got = lines(out)
    assert [line.split(" [")[0] for line in got] == ["ud: 30.0MB", "ud: 60.0MB", "ud: 70.0MB"]


def test_iteration_context_manager_resume_and_disable():
    out = io.StringIO()
    assert list(progress_bar(range(5), desc="items", file=out, display=Display(summary=True))) == list(range(5))
    assert lines(out) == [lines(out)[0]] and lines(out)[0].startswith("items: 100% 5/5")
    resumed = io.StringIO()
    with progress_bar(total=10, initial=4, desc="epoch 2/3", file=resumed, display=Display(summary=True)) as bar:
        bar.update(6)
    assert lines(resumed)[0].startswith("epoch 2/3: 100% 10/10")
    off = io.StringIO()
    with progress_bar(total=3, desc="x", file=off, disable=True, display=Display(summary=True)) as bar:
        bar.update(3)
    assert off.getvalue() == ""


def test_postfix_reads_as_tqdm_shows_it():
    bar, plain = tqdm(total=3, file=io.StringIO()), PlainProgress(total=3, file=io.StringIO())
    for target in (bar, plain):
        target.set_postfix(task="pos", loss=1.23456, step=3)
    assert plain.postfix == bar.postfix == "loss=1.23, step=3, task=pos"
    bar.close()


def test_a_bar_on_a_terminal_plain_lines_elsewhere(monkeypatch):
    monkeypatch.setattr(progress, "_in_notebook", lambda: False)
    terminal = Terminal()
    bar = progress_bar(total=3, desc="t", file=terminal)
    assert isinstance(bar, tqdm)
    bar.update(3)
    bar.close()
    assert "\r" in terminal.getvalue()  # tqdm redraws in place there
    assert isinstance(progress_bar(total=3, file=io.StringIO()), PlainProgress)
    assert is_terminal(terminal) and not is_terminal(io.StringIO()) and not is_terminal(object())
    closed = io.StringIO()
    closed.close()
    assert not is_terminal(closed)


def test_write_is_a_plain_flushed_line_in_a_log(monkeypatch):
    monkeypatch.setattr(progress, "uses_bars", lambda stream=None: False)
    out = io.StringIO()
    write("epoch 1: dev pos accuracy 90.00", file=out)
    PlainProgress.write("second", file=out)
    assert out.getvalue() == "epoch 1: dev pos accuracy 90.00\nsecond\n"


@pytest.mark.parametrize("terminal", [False, True])
def test_transformers_bars_are_off_in_logs_only_and_come_back(monkeypatch, terminal):
    from transformers.utils import logging as hf_logging

    monkeypatch.setattr(progress, "uses_bars", lambda stream=None: terminal)
    was = hf_logging.is_progress_bar_enabled()
    try:
        hf_logging.enable_progress_bar()
        with hf_bars_off_in_logs():
            assert hf_logging.is_progress_bar_enabled() is terminal
        assert hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # off already (HF_HUB_DISABLE_PROGRESS_BARS): left off
        with hf_bars_off_in_logs():
            assert not hf_logging.is_progress_bar_enabled()
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def test_every_must_be_a_fraction():
    with pytest.raises(ValueError, match="every"):
        PlainProgress(total=3, display=Display(every=0))
