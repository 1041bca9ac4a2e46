"""Config: TOML loading, dotted CLI overrides, rejection of unknown keys and wrong types, help."""

import copy
import dataclasses
import json
import pathlib
import tomllib

import pytest
import submitit.helpers  # noqa: F401  (its logging set-up closes the handlers of

#  pytest's capture when first imported inside a test: import it at collection)
import birdjepa._rs
import birdjepa.config as config
import birdjepa.config.command_line as command_line
import birdjepa.config.identity as identity
import birdjepa.data.loader_config

REPO = pathlib.Path(__file__).resolve().parents[1]


def write(tmp_path, text: str) -> pathlib.Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_toml_then_cli_overrides(tmp_path):
    text = 'n_steps = 7\nn_classes = 3\n[optim]\nlr = 0.01\n[model]\npatch = [4, 64]\n'
    p = write(tmp_path, text)
    cfg = command_line.cli(["--cfg", str(p), "--n_steps=40", "--optim.warmup", "3",
                      "--run_dir=/tmp/x", "--objective.name=lejepa", "--model.pos", "rope"])
    assert cfg.n_steps == 40 and cfg.n_classes == 3 and cfg.run_dir == "/tmp/x"
    assert cfg.optim.lr == 0.01 and cfg.optim.warmup == 3  # TOML kept, CLI applied
    assert cfg.model.patch == (4, 64) and cfg.model.pos == "rope"
    assert cfg.objective.name == "lejepa"
    assert command_line.cli([f"--cfg={p}"]).n_steps == 7


@pytest.mark.parametrize(
    "text,message",
    [
        ("n_stepz = 3", "unknown config key 'n_stepz'"),
        ("[optim]\nlrr = 0.1", "unknown config key 'optim.lrr'"),
        ("[objective.mae]\nratio = 0.5", "unknown config key 'objective.mae.ratio'"),
        ('n_steps = "ten"', "config key 'n_steps': expected int, got str 'ten'"),
        ("seed = 1.5", "config key 'seed': expected int, got float 1.5"),
        ('[optim]\nlr = "fast"', "config key 'optim.lr': expected float, got str 'fast'"),
        ("[optim]\nmuon = 1", "config key 'optim.muon': expected bool, got int 1"),
        ('[objective]\nname = "byol"', "config key 'objective.name': expected one of"),
        ("[model]\npatch = [16]", "config key 'model.patch'"),
        ("optim = 3", "config key 'optim': expected a table, got int 3"),
    ],
)
def test_toml_rejects(tmp_path, text, message):
    with pytest.raises(config.ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        config.load(write(tmp_path, text))


def test_cli_rejects_unknown_flag_and_wrong_type():
    with pytest.raises(config.ConfigError, match="optim.lrr"):
        command_line.cli(["--optim.lrr=0.1"])
    with pytest.raises(SystemExit):
        command_line.cli(["--n_steps=many"])


def test_ints_are_accepted_for_floats(tmp_path):
    assert config.load(write(tmp_path, "[optim]\nlr = 1\n")).optim.lr == 1.0


def test_round_trip(tmp_path):
    cfg = command_line.cli(["--n_classes=5", "--model.patch", "2", "128", "--optim.muon=True"])
    again = config.from_dict(config.Config, tomllib.loads(config.to_toml(cfg)))
    assert again == cfg


def test_help_lists_every_field(capsys):
    with pytest.raises(SystemExit) as e:
        command_line.cli(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())

    def leaves(cls, prefix=""):
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(f.type):
                yield from leaves(f.type, f"{prefix}{f.name}.")
            else:
                yield prefix + f.name

    names = list(leaves(config.Config))
    assert len(names) > 50
    for name in names:
        assert f"--{name}" in out, name
    assert "Stop with an error after this many consecutive" in out  # docstrings shown
    assert "(default: 10)" in out


@pytest.mark.parametrize("name", ["demo", "vit-s"])
def test_shipped_configs_load(name):
    cfg = config.load(REPO / "configs" / f"{name}.toml")
    assert cfg.n_steps > 0
    if name == "demo":
        assert cfg.data.train_shards == "data/demo/train" and cfg.n_classes == 12
    else:
        assert cfg.data.train_shards is None  # dataset-specific: must be given


def test_config_diff_and_hash_ignore_prefixes():
    a = {"seed": 0, "optim": {"lr": 1e-3, "warmup": 10}, "wandb": {"name": "x"}, "n_steps": 10}
    b = {"seed": 0, "optim": {"lr": 2e-3, "warmup": 10}, "wandb": {"name": "y"}, "n_steps": 20}
    ignore = ("wandb", "n_steps")
    assert identity.config_diff(a, b, ignore=ignore) == [("optim.lr", 1e-3, 2e-3)]
    assert identity.config_hash(a, ignore=ignore) != identity.config_hash(b, ignore=ignore)
    b["optim"]["lr"] = 1e-3
    assert identity.config_hash(a, ignore=ignore) == identity.config_hash(b, ignore=ignore)
    assert identity.config_diff({"a": 1}, {"b": 2}) == [("a", 1, "<missing>"), ("b", "<missing>", 2)]


def test_configs_saved_before_new_model_fields_resume_and_keep_their_run_id():
    """model.fc_norm and model.gelu came later: a checkpoint's config without them means their
    legacy values, so it resumes, initialises an encoder and hashes (run id) as before."""
    cfg = config.finalize(config.load(REPO / "configs" / "demo.toml"))
    assert (cfg.model.fc_norm, cfg.model.gelu) == (False, "tanh")
    new = dataclasses.asdict(cfg)
    old = copy.deepcopy(new)
    for key in ("fc_norm", "gelu"):
        del old["model"][key]
    identity.check_same(old, cfg, ignore=identity.NOT_SHAPING, what="resume")
    identity.check_same(old, cfg, keys=identity.ENCODER_SHAPING, what="init_encoder")
    # The run id of the old dict (hashed without these keys) is the new config's.
    assert identity.config_hash(new) == identity.config_hash(old)
    erf = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, gelu="erf"))
    assert identity.config_hash(dataclasses.asdict(erf)) != identity.config_hash(old)
    with pytest.raises(config.ConfigError, match="model.gelu: checkpoint has 'tanh', config "
                                                 "has 'erf'"):
        identity.check_same(old, erf, ignore=identity.NOT_SHAPING, what="resume")


def test_runs_saved_before_the_resampler_setting_keep_their_filter_and_run_id():
    """data.resampler came with issue 36: a run saved without it resampled with the legacy filter,
    so an unset resampler resumes it with that filter (and the resume check passes); a new run
    gets the new default; an explicit value stays, and a resume that changes it is refused; a
    config at the default (unset) hashes (run id) as before, as does one naming the legacy
    filter."""
    cfg = config.finalize(config.load(REPO / "configs" / "demo.toml"))
    assert cfg.data.resampler is None
    old = dataclasses.asdict(cfg)
    del old["data"]["resampler"]
    resumed = identity.with_resampler(cfg, old)
    assert resumed.data.resampler == birdjepa.data.loader_config.LEGACY_RESAMPLER == "rubato-bh2-1024"
    identity.check_same(old, resumed, ignore=identity.NOT_SHAPING, what="resume")
    assert identity.with_resampler(cfg, None).data.resampler == "soxr-hq"
    new = dataclasses.asdict(identity.with_resampler(cfg, None))
    assert identity.with_resampler(cfg, new).data.resampler == "soxr-hq"
    explicit = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, resampler="soxr-hq"))
    assert identity.with_resampler(explicit, old) is explicit
    with pytest.raises(config.ConfigError, match="data.resampler: checkpoint has "
                                                 "'rubato-bh2-1024', config has 'soxr-hq'"):
        identity.check_same(old, explicit, ignore=identity.NOT_SHAPING, what="resume")
    assert identity.config_hash(old) == identity.config_hash(dataclasses.asdict(cfg)) \
        == identity.config_hash(dataclasses.asdict(resumed))
    assert identity.config_hash(dataclasses.asdict(explicit)) != identity.config_hash(old)
    # The loader of the resolved run: the legacy filter is left out of its config (fingerprint).
    assert "resampler" not in resumed.data.shaping_values()
    assert identity.with_resampler(cfg, None).data.shaping_values()["resampler"] == "soxr-hq"
    bad = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, resampler="soxr"))
    with pytest.raises(config.ConfigError, match=r'^data.resampler: expected one of soxr-hq, '
                                                 r'rubato-bh2-1024, got "soxr"$'):
        config.validate(bad)


def test_every_saved_form_reads_its_resampler_by_one_rule(tmp_path):
    """Issue 50 item 1: "unset means the saved one, else the legacy one, else the default" had a
    copy for each saved form. A run's config, a loader state, a pack's plan and an export's
    audio settings now read it through birdjepa.data.loader_config.saved_resampler, and agree on the
    three cases: nothing saved, saved before the setting existed, saved with a filter."""
    import birdjepa.data.pack_dst as pack_dst
    import birdjepa.models.artifact as artifact

    legacy, default = birdjepa.data.loader_config.LEGACY_RESAMPLER, birdjepa.data.loader_config.DEFAULT_RESAMPLER
    assert legacy != default
    cfg = config.finalize(config.load(REPO / "configs" / "demo.toml"))
    audio = artifact.run_input(identity.with_resampler(cfg, None).data, "run")
    plan = tmp_path / pack_dst.PLAN

    def forms(saved):  # None: nothing saved; else the saved data settings
        run = None if saved is None else {"data": saved}
        state = None if saved is None else {"config": saved}
        if saved is None:
            plan.unlink(missing_ok=True)
        else:
            plan.write_text(json.dumps(saved))
        got = [identity.with_resampler(cfg, run).data.resampler,
               birdjepa.data.loader_config.resolve_resampler(cfg.data, state),
               pack_dst.plan_resampler(str(tmp_path), None)]
        if saved is not None:  # an export always has its settings
            got.append(artifact.input_settings(
                {k: v for k, v in audio.items() if k != "resampler"} | saved, "x")["resampler"])
        return got

    assert forms(None) == [default] * 3
    assert forms({}) == [legacy] * 4
    assert forms({"resampler": default}) == [default] * 4
    assert forms({"resampler": legacy}) == [legacy] * 4
    # An explicit setting wins over whatever was saved, in each form's reader.
    assert birdjepa.data.loader_config.saved_resampler(default, {}) == default
    assert pack_dst.plan_resampler(str(tmp_path), default) == default


# Issue 23 item 13 (and 12): bad values main accepted (then trained NaN or hung) or crashed on
# with a traceback. Each is one ConfigError naming the key, the expected and the actual value.
NAN = float("nan")
BAD_VALUES = [
    ("objective.supervised.augment.gain", -1.0, "a finite number >= 0"),
    ("objective.supervised.augment.time_mask", 1.5, "a fraction in [0, 1)"),
    ("objective.lejepa.augment.freq_mask", NAN, "a fraction in [0, 1)"),
    ("objective.supervised.label_smoothing", NAN, "a number in [0, 1)"),
    ("objective.supervised.label_smoothing", 2.0, "a number in [0, 1)"),
    ("objective.lejepa.lambd", NAN, "a weight in [0, 1]"),
    ("objective.lejepa.lambd", 2.0, "a weight in [0, 1]"),
    ("objective.lejepa.n_slices", 0, "an int >= 1"),
    ("objective.lejepa.t_max", 0.0, "a finite number > 0"),
    ("objective.lejepa.n_points", 0, "an int >= 2"),
    ("objective.lejepa.proj_dim", -1, "an int >= 0"),
    ("objective.lejepa.augment.mix", 5.0, "a weight in [0, 1]"),
    ("objective.lejepa.augment.gain", NAN, "a finite number >= 0"),
    ("objective.lejepa.augment.lowpass_max", 0.5, "a fraction in [lowpass_min=0.9, 1]"),
    ("objective.lejepa.augment.lowpass_p", 2.0, "a probability in [0, 1]"),
    ("peak_tflops", -1.0, "a finite number > 0 or unset"),
    ("seed", -1, "an int in [0, 2**32 - 1]"),
    ("seed", 2**40, "an int in [0, 2**32 - 1]"),
    ("model.depth", 0, "an int >= 1"),
    ("model.width", 0, "an int >= 1"),
    ("model.patch", (0, 16), "two ints >= 1"),
    ("model.mlp_ratio", -1.0, "a finite number > 0"),
    ("model.n_registers", -1, "an int >= 0"),
    ("model.layerscale", NAN, "a finite number >= 0"),
    ("n_classes", 10**12, "at most"),  # item 12: bounded by the memory it implies
    ("data.n_local", 1000, "at most 801 (the distinct 2 s crop positions in a 10 s window"),
    # Issue 47 item 20d: a run id is one path component of safe characters (it named a
    # directory outside runs/, nested an absolute path under it, or held a newline).
    ("run_id", "../../escaped", "one path component of letters, digits"),
    ("run_id", "/abs/run", "one path component of letters, digits"),
    ("run_id", "a\nb", "one path component of letters, digits"),
    # Item 20c: a heartbeat timeout of 0 or less was accepted.
    ("distributed.heartbeat_timeout_s", 0, "an int >= 1"),
    ("distributed.init_timeout_s", -5, "an int >= 1"),
    ("distributed.shutdown_timeout_s", 0, "an int >= 1"),
]


def with_value(cfg, key: str, value):
    """`cfg` with the dotted `key` replaced."""
    head, _, rest = key.partition(".")
    if not rest:
        return dataclasses.replace(cfg, **{head: value})
    return dataclasses.replace(cfg, **{head: with_value(getattr(cfg, head), rest, value)})


@pytest.mark.parametrize("key, value, expected", BAD_VALUES,
                         ids=[f"{k}={v}" for k, v, _ in BAD_VALUES])
def test_bad_values_name_the_key_expected_and_actual(key, value, expected):
    import tiny

    objective = "lejepa" if "lejepa" in key or "n_local" in key else "supervised"
    cfg = tiny.tiny_config(objective)
    if "n_local" in key:
        cfg = with_value(with_value(cfg, "data.view_window_s", 10.0), "data.local_frames", 16)
    if key == "objective.lejepa.augment.lowpass_max":  # an inverted low-pass range
        cfg = with_value(cfg, "objective.lejepa.augment.lowpass_min", 0.9)
    cfg = with_value(cfg, key, value)
    if key.startswith("model."):  # as a TOML or the CLI gives them: resolved by finalize
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(
            config.architecture.ModelConfig(width=32, depth=1, n_heads=2), **{key[6:]: value}))
    with pytest.raises(config.ConfigError) as e:
        config.finalize(cfg)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{key}: expected {expected}"), line
    assert line.endswith(f"got {value!r}"), line


def test_unknown_keys_are_one_line_with_close_matches(tmp_path):
    with pytest.raises(config.ConfigError, match=r"^unknown option --optim\.lrr; did you mean "
                                                 r"--optim\.lr"):
        command_line.cli(["--optim.lrr=0.1"])
    with pytest.raises(config.ConfigError, match=r"^unknown config key 'optim\.lrr'; did you "
                                                 r"mean 'optim\.lr'"):
        config.load(write(tmp_path, "[optim]\nlrr = 0.1"))
    with pytest.raises(config.ConfigError, match=r"^unknown option --zzz; expected one of "):
        command_line.cli(["--zzz=1"])


@pytest.fixture
def shards(tmp_path):
    import loader_shards

    d = tmp_path / "shards"
    d.mkdir()
    loader_shards.write(d / "a.arrow", loader_shards.table(range(8), labels=lambda i: i % 3))
    (tmp_path / "plain.txt").write_text("not arrow")
    return d


@pytest.fixture
def restore_signals():
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)
    signal.set_wakeup_fd(-1)


@pytest.mark.parametrize("args, message", [
    (["--data.audio_column=nope"], "data.audio_column: expected a column of the shards, got "
                                   "'nope' ("),
    (["--data.label_column=nope"], "data.label_column: expected a column of the shards, got "
                                   "'nope' ("),
    (["--data.train_shards={tmp}/plain.txt"], "data.train_shards: expected readable Arrow "
                                              "shards, got '{tmp}/plain.txt' ("),
    (["--run_dir=/proc/nope/run"], "run_dir: expected a directory this process can write, got "
                                   "'/proc/nope/run'"),
    (["--optim.lrr=1"], "unknown option --optim.lrr; did you mean --optim.lr"),
    (["--n_classes=1000000000"], "n_classes: expected at most "),
])
def test_start_up_errors_are_one_line_exit_2_and_leave_no_run_dir(tmp_path, shards, args,
                                                                  message, restore_signals):
    """Item 13: main printed tracebacks for the data-open errors and the unwritable run_dir, a
    5-line box for an unknown flag, and left a run directory behind."""
    import contextlib
    import io

    import birdjepa.pretrain

    run_dir = tmp_path / "run"
    argv = ["--cfg", str(REPO / "configs/demo.toml"), "--n_classes=3", "--n_steps=1",
            f"--data.train_shards={shards}", f"--data.eval_shards={shards}",
            f"--run_dir={run_dir}", "--wandb.mode=disabled", "--data.n_workers=1"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = birdjepa.pretrain.main(argv + [a.format(tmp=tmp_path) for a in args])
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert message.format(tmp=tmp_path) in lines[0], lines
    assert not run_dir.exists()


def test_local_frames_are_derived_from_local_s_and_never_padded():
    """Issue 23 item 10: main kept the default local_frames=192 for local_s=0.5 (48 real Kaldi
    frames): 144 rows of zero-padding without a word."""
    import tiny

    cfg = tiny.tiny_config("lejepa")
    cfg = with_value(with_value(cfg, "data.n_frames", 64), "data.view_window_s", 10.0)
    cfg = with_value(with_value(cfg, "data.n_local", 2), "data.local_s", 0.5)
    assert birdjepa._rs.kaldi_frames(5.0) == 498 and birdjepa._rs.kaldi_frames(2.0) == 198
    assert birdjepa._rs.kaldi_frames(0.5) == 48
    assert config.finalize(cfg).data.local_frames == 48  # 48 frames, 3 rows of 16-frame patches
    two_s = config.finalize(with_value(cfg, "data.local_s", 2.0))
    assert two_s.data.local_frames == 64  # 198 frames, at most n_frames=64
    default = tiny.tiny_config("lejepa")
    assert config.finalize(with_value(default, "data.n_frames", 512)).data.local_frames == 192
    with pytest.raises(config.ConfigError) as e:
        config.finalize(with_value(cfg, "data.local_frames", 64))
    assert str(e.value) == ("data.local_frames: expected at most 48 (the frames of a "
                            "local_s=0.5 s crop; more would be zero-padding; leave it unset to "
                            "derive it), got 64")


def test_settings_added_later_say_so_where_they_are_declared():
    """Issue 50 item 4: which loader settings count in a run's hash only away from their
    default is said in LoaderConfig's declaration (`_added`, `_into_config`, `_resampler`), not
    in a table of identity's; the set is the one run ids were made with (pinned: a change moves
    every saved run's id)."""
    assert sorted(identity.ADDED_DATA_KEYS) == sorted((
        "block_size", "shuffle_window", "mean", "std", "max_replacements", "clip_s",
        "sample_rate", "crop", "events_column", "segment", "segment_start_column",
        "segment_end_column", "pad", "resampler"))
    fields = {f.name: f for f in dataclasses.fields(birdjepa.data.loader_config.LoaderConfig)}
    added = {n for n, f in fields.items() if f.metadata.get("omit_at_default")}
    assert added - set(identity.ADDED_DATA_KEYS) == {"view_window_s", "n_local"}
    base = dataclasses.asdict(config.Config())
    for name in identity.ADDED_DATA_KEYS:
        away = {**base, "data": {**base["data"], name: "x"}}
        assert identity.config_hash(away) != identity.config_hash(base), name
