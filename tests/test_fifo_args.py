"""Issue 38 item 9: a FIFO (or a device) named as the data argument blocked in open(), train
ignoring SIGTERM meanwhile: embed/predict SOURCE, `sources pack` SRC, `train
--data.train_shards`, `birdjepa.data.Loader(FIFO)`, evaluate's shards. Each is now refused by
its file type before anything opens it."""

import os
import re
import subprocess
import sys

import pytest
import tiny
from test_models_cli import run_dir  # noqa: F401 (shared module fixture)

import birdjepa._rs
import birdjepa.data
import birdjepa.data.ipc
import birdjepa.embed
import birdjepa.models.detect
import birdjepa.predict
import birdjepa.sources


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "shard.arrow"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(120)
def test_loader_and_readers_refuse_a_fifo(fifo):
    for path, what in ((fifo, "a FIFO (named pipe)"), ("/dev/zero", "a character device")):
        with pytest.raises(birdjepa._rs.DatasetError, match=f"expected a regular file .*got {re.escape(what)}"):
            birdjepa.data.Loader([str(path)], batch_size=2)
        with pytest.raises(birdjepa._rs.DatasetError, match=f"expected a regular file .*got {re.escape(what)}"):
            birdjepa.data.ipc.schema(str(path))


@pytest.mark.heavy
@pytest.mark.timeout(120)
def test_commands_refuse_a_fifo_argument(fifo, tmp_path, capsys, run_dir):  # noqa: F811
    assert birdjepa.sources.main(["pack", str(fifo), "--out_dir", str(tmp_path / "p")]) == 2
    assert "got a FIFO (named pipe)" in capsys.readouterr().err
    for main in (birdjepa.embed.main, birdjepa.predict.main):
        assert main([str(run_dir), str(fifo), "--out", str(tmp_path / "x.parquet")]) == 2
        assert f"SOURCE: expected an audio file, a directory or Arrow shards, got '{fifo}', " \
               "a FIFO (named pipe)" in capsys.readouterr().err
    cfg = tmp_path / "t.toml"
    cfg.write_text(tiny.tiny_toml(fifo, n_steps=1))
    p = subprocess.run([sys.executable, "-m", "birdjepa.pretrain", "--cfg", str(cfg), "--run_dir",
                        str(tmp_path / "run")], capture_output=True, text=True, timeout=100)
    assert p.returncode == 2 and "got a FIFO (named pipe)" in p.stderr, p.stderr


@pytest.mark.timeout(60)
def test_an_output_path_that_is_not_a_regular_file_is_refused_without_opening_it(tmp_path):
    """Issue 47 item 15: `embed`/`predict --out` naming an existing FIFO (or a link to
    /dev/zero) blocked in the "is it one of our outputs?" check, which opened and read it
    before any compute; evaluate's out_dir/summary.json the same. Refused by its file type."""
    import birdjepa.config
    import birdjepa.evaluate.runner
    import birdjepa.models.outfile
    import birdjepa.models.recordings

    out = tmp_path / "emb.csv"
    os.mkfifo(out)
    link = tmp_path / "zero.parquet"
    link.symlink_to("/dev/zero")
    for path, what in ((out, "a FIFO (named pipe)"), (link, "a character device")):
        with pytest.raises(ValueError, match=f"--out: expected a new file or a regular file "
                           f".*got {re.escape(repr(str(path)))}, {re.escape(what)}"):
            birdjepa.models.outfile.check_out(path, (".csv", ".parquet"))
    ev = tmp_path / "eval"
    ev.mkdir()
    os.mkfifo(ev / "summary.json")
    with pytest.raises(birdjepa.config.ConfigError, match=r"out_dir: .*summary.json is a FIFO"):
        birdjepa.evaluate.runner.check_out_dir(ev)
