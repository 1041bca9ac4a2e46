"""The config's walk: which modules a run's config passes through between the TOML file and a
validated config (`load` -> `finalize` -> the device check, what `open_run` does before it opens
the loaders), as calls from one module of the package into another.

    python docs/issues/027-honest-names/walk.py [configs/demo.toml]

Prints every cross-module call in order ("stops") and counts the "climbs": calls into a higher
floor than the caller's (floors as tests/test_structure.py's FLOORS: common < data < config <
...), i.e. a lower layer calling back up. Run it on two checkouts to compare them."""

import sys

import birdjepa.config

FLOORS = ("birdjepa.common", "birdjepa.data", "birdjepa.config")


def floor(module: str) -> int:
    for i, prefix in enumerate(FLOORS):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return len(FLOORS)


def main(path: str = "configs/demo.toml") -> None:
    calls: list[tuple[str, str, str]] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        if callee.startswith("birdjepa") and caller.startswith("birdjepa") and callee != caller:
            calls.append((caller, callee, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        cfg = birdjepa.config.finalize(birdjepa.config.load(path))
        if hasattr(birdjepa.config, "check_layout"):  # after issue 39
            birdjepa.config.check_layout(cfg, n_devices=1, process_count=1)
        else:  # before: open_run validated the whole config a second time
            birdjepa.config.validate(cfg, n_devices=1, process_count=1)
    finally:
        sys.setprofile(None)
    edges = []  # consecutive duplicates folded: one stop per change of place
    for c in calls:
        if not edges or edges[-1] != c:
            edges.append(c)
    climbs = [e for e in edges if floor(e[1]) > floor(e[0])]
    for caller, callee, fn in edges:
        mark = "  ^ climb" if floor(callee) > floor(caller) else ""
        print(f"{caller} -> {callee}.{fn}{mark}")
    modules = sorted({m for e in edges for m in e[:2]})
    print(f"\n{len(edges)} stops, {len(climbs)} climbs, {len(modules)} modules: {', '.join(modules)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
