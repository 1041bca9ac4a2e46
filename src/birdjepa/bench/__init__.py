"""Benchmarks: `python -m birdjepa.bench {transforms,loader,train,ckpt}`. They print figures."""
