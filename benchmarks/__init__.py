"""Benchmarks: `python -m benchmarks {transforms,loader,train,ckpt}`. They print figures."""
