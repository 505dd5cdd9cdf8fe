"""bench/server.py's split of the server's CPU (issue 23, stop 14): the decision log's integration
is the sequencer process's main thread; its other thread (SQLite's WAL checkpoints for every
process) counts with the serving processes. Real processes burning CPU in a real thread."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.server import sequencer_cpu_seconds, tree_cpu_seconds  # noqa: E402

# argv[1] names the process as grantd's sequencer does; argv[2]: which thread burns the CPU
BURN = """
import sys, threading, time
def burn():
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass
if sys.argv[2] == "main":
    burn()
else:
    t = threading.Thread(target=burn); t.start(); t.join()
print("done", flush=True)
time.sleep(30)
"""


def _run(where: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", BURN, "grantd.web.sequencer", where], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "done"
    return child


def test_only_the_sequencer_main_thread_counts_as_the_logs_integration():
    root = os.getpid()
    before_tree, before_log = tree_cpu_seconds([root]), sequencer_cpu_seconds([root])
    in_thread = _run("thread")  # like the checkpoint thread: the tree's, not the log's
    try:
        time.sleep(0.05)
        assert tree_cpu_seconds([root]) - before_tree >= 0.5
        assert sequencer_cpu_seconds([root]) - before_log < 0.2
        in_main = _run("main")  # like the sequencer's steps
        try:
            assert sequencer_cpu_seconds([root]) - before_log >= 0.5
        finally:
            in_main.kill()
            in_main.wait()
    finally:
        in_thread.kill()
        in_thread.wait()
