"""Deterministic synthetic bird-song corpus in Hugging Face `datasets` on-disk format.

`write(out_dir)` (or `python -m birdjepa.demo_data OUT_DIR`) writes what
`datasets.Dataset.save_to_disk(out_dir, num_shards=K)` would write for an audio dataset:
`data-0000i-of-0000K.arrow` Arrow IPC stream shards whose schema metadata carries the
`huggingface` features JSON, plus `dataset_info.json` and `state.json`, so that both
`datasets.load_from_disk(out_dir)` and our own loader read it. Only numpy, soundfile and pyarrow
are used; `datasets` itself is not needed.

Each row is one recording of one of `SPECIES` (made-up species with eBird-style codes), encoded
as ogg/vorbis, mp3, flac or wav (PCM_16 or FLOAT) at 22.05, 44.1 or 48 kHz, mono or stereo. A
recording is a sequence of song phrases (frequency-modulated syllables, trills, buzzes, harmonic
stacks; the pattern is specific to the species) separated by silences, with per-recording
pitch and tempo jitter, coloured background noise at a random SNR and faint phrases of other
species. Labels are balanced and the row order is shuffled, so shards are not species-sorted.

`soundscape.write(out_dir)` (or `python -m birdjepa.demo_data OUT_DIR --soundscapes N`) writes
a test split in BirdSet's shape instead: 5 s segments of multi-species soundscapes with a
multilabel `ebird_code_multilabel` column.

Everything is a pure function of the arguments: the same call writes byte-identical files.
"""

import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.codecs as codecs
import birdjepa.demo_data.soundscape as soundscape
import birdjepa.demo_data.synth as synth
import birdjepa.demo_data.writer as writer

CODECS = catalogue.CODECS
SPECIES = catalogue.SPECIES
Recording = catalogue.Recording
plan_corpus = catalogue.plan_corpus
synthesize = synth.synthesize
encode = codecs.encode
write = writer.write
write_soundscapes = soundscape.write

__all__ = ["CODECS", "SPECIES", "Recording", "encode", "plan_corpus", "soundscape", "synthesize",
           "write", "write_soundscapes"]
