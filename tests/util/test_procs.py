"""autotune's own helper processes stop when the command ends, even where something else still holds
their pipes; and a trial's descendants are found wherever they went. Each runs in a process of its own:
stopping the helpers inside the test process would take them from the tests around it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_helpers_stop_within_their_wait_though_a_leftover_process_holds_the_trackers_pipe():
    out = run('''
        import os, time
        from multiprocessing import resource_tracker
        from autotune.util import procs

        resource_tracker.ensure_running()
        tracker = resource_tracker._resource_tracker._pid
        holder = os.fork()
        if holder == 0:            # a copy of the tracker's pipe, as a daemon of a trial would hold it
            time.sleep(60)
            os._exit(0)
        started = time.monotonic()
        procs.stop_helpers(wait_s=1.0)
        took = time.monotonic() - started
        gone = not os.path.exists(f"/proc/{tracker}")
        os.kill(holder, 9)
        os.waitpid(holder, 0)
        print(gone, took < 10)
    ''')
    assert out.split() == ["True", "True"]


def test_a_subreaper_ends_the_orphans_of_its_children_too():
    out = run('''
        import os, time
        from autotune.util import procs

        assert procs.become_subreaper()
        read, write = os.pipe()
        if os.fork() == 0:          # a child whose own child daemonizes, then the child exits
            os.setsid()
            if os.fork() == 0:
                os.write(write, f"{os.getpid()}\\n".encode())
                time.sleep(60)
                os._exit(0)
            os._exit(0)
        daemon = int(os.read(read, 32))
        time.sleep(0.2)
        before = daemon in procs.descendants(os.getpid())    # reparented here, not to init
        procs.end_descendants()
        print(before, os.path.exists(f"/proc/{daemon}"))
    ''')
    assert out.split() == ["True", "False"]


def test_the_command_gives_back_the_reapers_status_to_a_caller_that_goes_on():
    # `main()` makes its process the reaper of orphans while the command runs; a Python caller whose
    # process goes on afterwards (a notebook, a test) is left as it was, whatever the command's exit.
    out = run('''
        import sys
        from autotune.cli.main import main
        from autotune.util import procs

        before = procs.is_subreaper()
        sys.argv = ["autotune"]          # no command: the help, exit 2, through the whole of main()
        code = main()
        print(before, code, procs.is_subreaper())
    ''')
    assert out.split()[-3:] == ["False", "2", "False"]
