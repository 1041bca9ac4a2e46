"""`Preemption`: a flag raised by a stop signal and read by the training loop at step boundaries.

No submitit here: the command line and `birdjepa.launch.job.TrainingJob` both install it.

A second Ctrl-C aborts the process at once (exit 130) from two places, whichever comes first:
the Python handler (the main thread between two bytecodes) and a watcher thread woken by the
signal's wakeup byte (`signal.set_wakeup_fd`, written by the C-level handler), so neither a
main thread busy in a long XLA call nor a KeyboardInterrupt swallowed inside a garbage-collector
callback (`Exception ignored in _xla_gc_callback`) can hold it up. The abort is `os._exit`: no
exception to swallow, no clean-up that waits (an async save in flight is left as a temporary
directory, which the next run removes).
"""

import os
import signal
import sys
import threading

EXIT_INTERRUPTED = 130


def hard_abort() -> None:
    """Say so on stderr and leave at once with status 130."""
    try:
        sys.stderr.write("interrupted twice: aborted without saving\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_INTERRUPTED)


class Preemption:
    """A flag raised by the preemption signal, read at step boundaries."""

    def __init__(self, *, abort=hard_abort):
        """`abort()`: what a second Ctrl-C does (default `hard_abort`)."""
        self._event = threading.Event()
        self.signum: int | None = None
        self.previous_handler = None
        """The handler replaced by `install` (under submitit: its requeue handler)."""
        self.abort = abort
        self._count: dict[int, int] = {}
        self._count_lock = threading.Lock()
        self._aborting = threading.Lock()
        """Held by the first of the handler and the watcher to abort, so the message is written
        once (both can see the second signal within the same microseconds)."""
        self._aborted = threading.Event()

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self, signum: int = signal.SIGUSR2) -> None:
        self.signum = signum
        self._event.set()

    def _seen(self, signum: int, by: str) -> int:
        """How many times `by` ("handler" or "watcher") has now seen `signum`."""
        with self._count_lock:
            key = (signum, by)
            self._count[key] = self._count.get(key, 0) + 1
            return self._count[key]

    def _abort_once(self) -> None:
        """Call `abort` unless the other path already is; then wait (up to a second) for it."""
        if self._aborting.acquire(blocking=False):
            self.abort()
            self._aborted.set()
        else:
            self._aborted.wait(1.0)

    def install(self, signum: int, *, second_aborts: bool = False) -> None:
        """Replace the current handler of `signum` with one that sets the flag and prints one
        line. With `second_aborts` (Ctrl-C), the same signal arriving again calls `abort`."""
        self.previous_handler = signal.getsignal(signum)

        def on_signal(sig, frame):
            if self._seen(sig, "handler") >= 2 and second_aborts:
                self._abort_once()
                return
            if not self.is_set():
                print(f"signal {signal.Signals(sig).name}: stopping at the next step boundary "
                      "to save a checkpoint" + (" (again to abort at once)" if second_aborts
                                                else ""), flush=True)
            self.set(sig)

        signal.signal(signum, on_signal)
        if second_aborts and threading.current_thread() is threading.main_thread():
            self._watch(signum)

    def _watch(self, signum: int) -> None:
        """A daemon thread that reads the wakeup bytes and aborts on the second `signum`."""
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            os.close(r)
            os.close(w)
            return

        def watch():
            while True:
                for byte in os.read(r, 64):
                    if byte == signum and self._seen(signum, "watcher") >= 2:
                        self._abort_once()

        threading.Thread(target=watch, name="preemption-watcher", daemon=True).start()
