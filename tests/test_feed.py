"""The prefetch thread reads ahead while updates run, and every batch carries the loader state
that resumes right after it (never the state of a batch still queued)."""

import threading
import time

import numpy as np
import pytest
import tiny

import birdjepa.train.feed
import birdjepa.train.state


class CountingLoader:
    """A tiny synthetic train loader that counts next() calls and records them."""

    def __init__(self, cfg):
        self.inner, _ = tiny.tiny_loaders(cfg)
        self.reads = 0
        self.read_event = threading.Condition()

    def __iter__(self):
        for b in self.inner:
            with self.read_event:
                self.reads += 1
                self.read_event.notify_all()
            yield b

    def state_dict(self):
        return self.inner.state_dict()

    def wait_reads(self, n: int, timeout: float = 30.0) -> bool:
        with self.read_event:
            return self.read_event.wait_for(lambda: self.reads >= n, timeout)


def test_reads_ahead_and_each_batch_carries_its_own_loader_state():
    cfg = tiny.finalize(tiny.tiny_config())
    mesh = birdjepa.train.state.make_mesh(1)
    loader = CountingLoader(cfg)
    feed = birdjepa.train.feed.Prefetcher(loader, cfg, mesh, depth=2)
    try:
        first = feed.next()
        # Without another next(): the thread fills the queue (2) and holds one more in hand.
        assert loader.wait_reads(3), loader.reads
        assert first.loader_state == {"n_batches": 1}  # not the loader's current, later state
        assert loader.state_dict()["n_batches"] >= 3
        second = feed.next()
        assert second.loader_state == {"n_batches": 2}
        ref, _ = tiny.tiny_loaders(cfg)
        it = iter(ref)
        for fed in (first, second):
            want = next(it)["data"]
            got = np.asarray(fed.batch["data"])[0]  # (n_micro=1, b, t, m)
            np.testing.assert_array_equal(got, want)
    finally:
        feed.close()


def test_loader_errors_reach_the_consumer_and_close_does_not_hang():
    cfg = tiny.finalize(tiny.tiny_config())

    class Broken:
        def __iter__(self):
            yield from ()
            raise OSError("shard vanished")

        def state_dict(self):
            return {}

    feed = birdjepa.train.feed.Prefetcher(Broken(), cfg, birdjepa.train.state.make_mesh(1))
    with pytest.raises(OSError, match="shard vanished"):
        feed.next()
    t0 = time.monotonic()
    feed.close()
    assert time.monotonic() - t0 < 5


def test_a_bad_first_batch_shape_is_reported():
    cfg = tiny.finalize(tiny.tiny_config())
    wrong = tiny.finalize(tiny.tiny_config(batch_size=4))
    train, _ = tiny.tiny_loaders(wrong)
    feed = birdjepa.train.feed.Prefetcher(train, cfg, birdjepa.train.state.make_mesh(1))
    with pytest.raises(ValueError, match=r"expected shape \(8, 32, 64\) from the config, got "
                                         r"\(4, 32, 64\)"):
        feed.next()
    feed.close()
