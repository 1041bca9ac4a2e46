"""The demo soundscape split: BirdSet's test_5s shape, readable by `datasets`, deterministic."""

import collections

import numpy as np
import pytest

import birdjepa.audio
import birdjepa.data.table as table
import birdjepa.demo_data
import birdjepa.demo_data.soundscape as soundscape


def test_soundscape_split_types_labels_and_determinism(tmp_path):
    datasets = pytest.importorskip("datasets")
    s = birdjepa.demo_data.write_soundscapes(tmp_path / "ss", n_soundscapes=4, n_segments=3,
                                             seed=5)
    ds = datasets.load_from_disk(str(tmp_path / "ss"))
    f = ds.features
    assert f["ebird_code_multilabel"].feature.names == [sp.code for sp in birdjepa.demo_data.SPECIES]
    assert type(f["ebird_code_multilabel"]).__name__ in ("Sequence", "List")
    assert f["start_time"].dtype == f["end_time"].dtype == "float64"
    assert f["filepath"].dtype == "string"
    assert len(ds) == s["n_segments"] == 12
    labels = ds["ebird_code_multilabel"]
    assert s["n_empty"] == sum(not x for x in labels)
    assert np.allclose(np.array(ds["end_time"]) - np.array(ds["start_time"]), 5.0)
    assert len(set(ds["filepath"])) == 4
    # Labels follow the plan (only planned species) and the audio is a 5 s clip.
    plans = soundscape.plan_soundscapes(4, 5, n_segments=3)
    for i, lab in enumerate(labels):
        assert set(lab) <= set(plans[i // 3].species)
    wave, sr = birdjepa.audio.decode(ds[0]["audio"]["bytes"])
    assert abs(len(wave) / sr - 5.0) < 0.1
    y = table.multi_hot(table.read(tmp_path / "ss", ["ebird_code_multilabel"]),
                        "ebird_code_multilabel", 12)
    assert y.sum() == sum(map(len, labels))
    # Deterministic: the same call, the same bytes.
    birdjepa.demo_data.write_soundscapes(tmp_path / "again", n_soundscapes=4, n_segments=3,
                                         seed=5)
    for a, b in zip(s["shards"], sorted((tmp_path / "again").glob("*.arrow")), strict=True):
        assert open(a, "rb").read() == b.read_bytes()


def test_soundscape_mixtures_over_many_soundscapes():
    """Over the demo plan: every species labelled somewhere, empty and multi-species segments."""
    counts, per_segment = collections.Counter(), collections.Counter()
    for plan in soundscape.plan_soundscapes(24, 2, n_segments=12):
        if not plan.species:
            continue
        counts.update(plan.species)
    assert len(counts) == 12 and min(counts.values()) >= 3
    for plan in soundscape.plan_soundscapes(6, 2, n_segments=12)[:6]:
        _, labels = soundscape.synthesize(plan)
        per_segment.update(len(x) for x in labels)
    assert per_segment[0] > 0 and sum(v for k, v in per_segment.items() if k >= 2) > 0
