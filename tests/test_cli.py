"""Every command a user can run speaks one voice (birdjepa.common.cli_args): `--help` exits 0,
names the module, gives every option a sentence and spells booleans `--flag` / `--no_flag`
(never tyro's `{True,False}`); a bad value, an unknown option or a bad choice is one line
`error: ...` on stderr and exit status 2, without a traceback."""

import concurrent.futures
import importlib
import pathlib
import re
import subprocess
import sys

import pytest

import benchmarks.__main__
import birdjepa.common.cli_args as cli_args
import birdjepa.config
import birdjepa.config.command_line
import birdjepa.evaluate.eval_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMANDS = [
    "birdjepa.pretrain", "birdjepa.launch", "birdjepa.evaluate",
    "birdjepa.evaluate.report", "birdjepa.embed", "birdjepa.predict", "birdjepa.export",
    "birdjepa.demo_data", "birdjepa.sources", "birdjepa.sources pack",
    "birdjepa.sources from_annotations", "benchmarks",
    *(f"benchmarks {name}" for name in benchmarks.__main__.NAMES),
]
"""Every `python -m ...` a user runs (README), with its subcommands."""


def run(command: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command.split(), *args], capture_output=True,
                          text=True, timeout=240, cwd=ROOT)


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return dict(zip(COMMANDS, pool.map(lambda c: run(c, "--help"), COMMANDS), strict=True))


def option_helps(text: str) -> dict[str, str]:
    """{option, positional or subcommand: its help text} of an argparse help page: an entry is
    `  INVOCATION  help...` (or the help on the next, deeper-indented lines)."""
    entries, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^( {2}| {4})(\S.*?)(?: {2,}(\S.*))?$", line)
        name = m and m.group(2)
        if m and (name.startswith("-") or re.fullmatch(r"[A-Z][A-Z_]*|[a-z]+", name)):
            current = name.split(",")[0].split()[0]
            entries[current] = m.group(3) or ""
        elif current and line.startswith(" " * 6) and line.strip():
            entries[current] = (entries[current] + " " + line.strip()).strip()
        else:
            current = None
    return entries


@pytest.mark.heavy
@pytest.mark.parametrize("command", COMMANDS)
def test_help_exits_0_names_the_command_and_explains_every_option(command, helps):
    r = helps[command]
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"usage: python -m {command}"), r.stdout[:200]
    assert "{True,False}" not in r.stdout and "__main__" not in r.stdout
    entries = option_helps(r.stdout)
    assert "-h" in entries and len(entries) >= 2, entries
    silent = [name for name, text in entries.items() if len(text.split()) < 3]
    assert silent == [], f"{command}: options without a sentence: {silent}"


INTERNAL = re.compile(r"birdjepa\.[a-z_]+\.[a-z_]|docs/issues|\w+\.py\b|src/")
"""A module path of the package, an investigation, a source file: what a user's help had
(`pretrain --help`: 445 lines, 9 of them naming modules or investigations)."""


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("birdjepa")])
def test_help_is_short_and_names_nothing_internal(command, helps):
    """Issue 50 item 6: each option's help is its docstring's first sentence (the details stay
    in the docstring and the guides), without the remarks that name modules or investigations.
    The benchmarks, a developer's tools, keep theirs."""
    text = helps[command].stdout
    internal = [line for line in text.splitlines()[1:] if INTERNAL.search(line)]
    assert internal == [], f"{command}: {internal}"
    long = {k: len(v.split()) for k, v in option_helps(text).items() if len(v.split()) > 80}
    assert long == {}, f"{command}: help over 80 words: {long}"


def test_help_keeps_a_fields_first_sentence_and_drops_internal_remarks():
    import birdjepa.common.cli_args as cli_args

    doc = ("Peak TFLOP/s of one device (the table in birdjepa.train.flops (H100, A100)); none "
           "on CPU (e.g. a laptop). The MFU uses it (docs/issues/013).")
    assert cli_args.summary(doc) == "Peak TFLOP/s of one device; none on CPU (e.g. a laptop)."
    assert cli_args.summary("A run directory; or an export (birdjepa.models); or "
                            "birdjepa.models.load's spec") == "A run directory; or an export."


def test_booleans_are_flag_and_no_flag(helps):
    assert "--optim.muon, --no_optim.muon" in helps["birdjepa.pretrain"].stdout
    assert "--dry_run, --no_dry_run" in helps["birdjepa.launch"].stdout
    assert "--centre, --no_centre" in helps["birdjepa.embed"].stdout
    cfg = birdjepa.config.command_line.cli(["--no_optim.muon", "--model.qk_norm", "--n_classes=3"])
    assert (cfg.optim.muon, cfg.model.qk_norm) == (False, True)
    assert birdjepa.config.command_line.cli(["--optim.muon=false"]).optim.muon is False  # older scripts


def test_train_bad_value_is_one_line_and_exit_2():
    r = run("birdjepa.pretrain", "--batch_size=abc")
    assert r.returncode == 2, r.stderr
    assert r.stderr == "error: argument --batch_size: expected an int, got 'abc'\n"
    assert r.stdout == ""


MAINS = {c: f"{c}.__main__" if c in ("birdjepa.launch", "birdjepa.evaluate", "birdjepa.demo_data")
         else c for c in COMMANDS if c.startswith("birdjepa.") and " " not in c}
"""The module whose main(argv) each command runs."""


def exit_status(command: str, argv: list[str]) -> int:
    main = importlib.import_module(MAINS[command]).main
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("command,argv,message", [
    ("birdjepa.pretrain", ["--resume=bogus"], "error: argument --resume: expected one of auto, "
     "never, force, extend, got 'bogus'"),
    ("birdjepa.pretrain", ["--optim.lrr=0.1"], "error: unknown option --optim.lrr; did you mean "
     "--optim.lr"),
    ("birdjepa.pretrain", ["--data.path_map", "no-equals"], "error: argument --data.path_map: "
     "expected OLD=NEW"),
    ("birdjepa.pretrain", ["--optim.muon=maybe"], "error: argument --optim.muon: expected true or "
     "false"),
    ("birdjepa.launch", ["--sweep=x", "--n_hours=soon"], "error: argument --n_hours: expected "
     "a number, got 'soon'"),
    ("birdjepa.evaluate", ["--shots=one"], "error: argument --shots: expected an int"),
    ("birdjepa.embed", ["m", "s", "--out=x", "--window=3"], "error: unknown option --window; "
     "did you mean --windows or --window_s?"),
    ("birdjepa.sources", ["pack", "src", "--out_dir=d", "--path_map=x"], "error: argument "
     "--path_map: expected OLD=NEW"),
    *[(c, ["--zzz_nope=1"], "error: ") for c in MAINS],
])
def test_errors_are_one_line_and_exit_2(command, argv, message, capsys):
    assert exit_status(command, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_lists_repeat_their_flag_and_path_maps_take_old_new(tmp_path):
    toml = tmp_path / "e.toml"
    toml.write_text('encoders = ["a"]\n[probe]\nlr = 0.01\n')
    cfg = birdjepa.config.command_line.cli(["--cfg", str(toml), "--encoders", "b", "--encoders", "c",
                               "--shots", "0", "--probe.epochs=3"], birdjepa.evaluate.eval_config.EvalConfig)
    assert (cfg.encoders, cfg.shots, cfg.probe.lr, cfg.probe.epochs) == (("b", "c"), (0,), 0.01, 3)
    cfg = birdjepa.config.command_line.cli(["--data.path_map", "/old=/new", "--data.path-map=/a=/b"])
    assert cfg.data.path_map == {"/old": "/new", "/a": "/b"}


def test_toml_path_map_table_and_the_old_segment_key(tmp_path):
    """README's TOML form of path_map is accepted; evaluate reads `test_segment` (older TOMLs)
    as `segment`, and refuses both at once."""
    train = tmp_path / "t.toml"
    train.write_text('[data]\npath_map = {"/home/me/hf" = "/scratch/hf"}\n')
    assert birdjepa.config.load(train).data.path_map == {"/home/me/hf": "/scratch/hf"}
    train.write_text('[data]\npath_map = {"/home/me/hf" = 3}\n')
    with pytest.raises(birdjepa.config.ConfigError, match="data.path_map': expected a table of "
                       "strings"):
        birdjepa.config.load(train)
    old = tmp_path / "e.toml"
    old.write_text('test_segment = "columns"\n')
    assert birdjepa.evaluate.eval_config.load(str(old)).segment == "columns"
    old.write_text('test_segment = "columns"\nsegment = "centre"\n')
    with pytest.raises(birdjepa.config.ConfigError, match="got both"):
        birdjepa.evaluate.eval_config.load(str(old))


def test_fail_is_one_line(capsys):
    assert cli_args.fail("a\nb  c") == 2
    assert capsys.readouterr().err == "error: a b c\n"


def test_every_parser_is_cli_args():
    """No command builds a bare argparse parser (its errors and lists would speak another
    voice): only birdjepa.common.cli_args does."""
    own = ROOT / "src/birdjepa/common/cli_args.py"
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    bare = [str(f.relative_to(ROOT)) for f in files
            if f != own and "argparse.ArgumentParser(" in f.read_text()]
    assert not bare, bare


@pytest.mark.heavy
def test_each_command_is_also_an_installed_script():
    """Issue 39 item 1: `[project.scripts]` gives each `python -m birdjepa.X` a script of the
    same behaviour; `make test` installs them (maturin develop) into this interpreter's bin."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert sorted(scripts) == sorted(f"birdjepa-{c}" for c in (
        "pretrain", "evaluate", "embed", "predict", "export", "sources", "launch", "demo-data"))
    for target in scripts.values():
        module, _, name = target.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), target
    bindir = pathlib.Path(sys.executable).parent
    for script, module in (("birdjepa-embed", "birdjepa.embed"),
                           ("birdjepa-pretrain", "birdjepa.pretrain")):
        r = subprocess.run([str(bindir / script), "--help"], capture_output=True, text=True,
                           timeout=240, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        assert option_helps(r.stdout).keys() == option_helps(run(module, "--help").stdout).keys()


@pytest.mark.heavy
def test_an_installed_script_names_itself_in_its_usage():
    """Issue 47 item 21: `birdjepa-embed --bad` printed `usage: python -m birdjepa.embed`."""
    import os
    import subprocess
    import sys

    bindir = os.path.dirname(sys.executable)
    for script, sub in (("birdjepa-embed", []), ("birdjepa-sources", ["pack"])):
        r = subprocess.run([os.path.join(bindir, script), *sub, "--no_such_flag"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stderr
        r = subprocess.run([os.path.join(bindir, script), *sub, "--help"], capture_output=True,
                           text=True, timeout=120)
        assert r.stdout.startswith(f"usage: {' '.join([script, *sub])} "), r.stdout[:200]
