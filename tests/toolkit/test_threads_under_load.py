"""The commands' thread choice (toolkit/threads.py) made round after round while a second process keeps one core busy,
as a shared machine does: each round's choice is one of the two counts it compares, torch's thread count is as it was
after each round, and no round raises. Each round measures as a command does (`cli.arguments.chosen_threads`, its
`command_threads` measured at the work's first batch, `start_work`), on a real tiny model's beam search. The load is a
real busy loop in a subprocess, started and stopped each round, and seen to have used CPU time while the round ran."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from helpers.tiny_models import tiny_model

from modeling_vaswani.toolkit.cli import arguments
from modeling_vaswani.toolkit.cli.arguments import chosen_threads
from modeling_vaswani.toolkit.threads import USER_SETTINGS, command_threads, decoding_sample, start_work, torch_threads

ROUNDS = 4


def cpu_seconds(pid: int) -> float:
    """The user and system CPU time process `pid` has used (Linux's /proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def one_core_busy():
    """A subprocess spinning in a loop for the block, then killed; yields it."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the load's CPU time from Linux's /proc")
def test_the_choice_under_load_is_always_a_valid_count_and_torch_count_is_restored(monkeypatch):
    for setting in USER_SETTINGS:
        monkeypatch.delenv(setting, raising=False)
    sample = decoding_sample(tiny_model(), num_beams=2)
    runs, choices = [], []

    def counted(limit=None):
        runs.append(torch.get_num_threads())
        return sample(limit)

    def observed(*args, **kwargs):  # the real choice, only recorded
        choices.append(command_threads(*args, **kwargs))
        return choices[-1]

    monkeypatch.setattr(arguments, "command_threads", observed)
    with torch_threads(2):
        for number in range(ROUNDS):
            del runs[:], choices[:]
            with one_core_busy() as busy:
                time.sleep(0.05)  # the loop running before the measuring starts
                with chosen_threads("vaswani-test", counted, None, "decoding") as known:
                    assert known is None and runs == []  # put off until the work starts
                    start_work()
                    applied = torch.get_num_threads()
                    start_work()  # a later batch: nothing measured again
                assert torch.get_num_threads() == 2, f"round {number}: the command's count was not set back"
                assert busy.poll() is None and cpu_seconds(busy.pid) > 0.02, "the load was not running"
            (chosen,) = choices
            assert chosen.reason == "measured" and chosen.count in (1, 2) and applied == chosen.count, (number, chosen)
            assert chosen.other[0] == 3 - chosen.count and chosen.seconds > 0 and chosen.other[1] > 0
            assert runs == [1, 1, 2], (number, runs)  # once untimed on one thread, then each count once
