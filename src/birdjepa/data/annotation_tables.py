"""Annotation tables read as events (recording, start, end, label): Raven Pro selection tables
and CSV files, for `python -m birdjepa.sources from_annotations` (birdjepa.data.from_annotations).

* Raven Pro selection tables (tab-separated, any suffix but `.csv`): `Begin Time (s)`,
  `End Time (s)` and a label column (`Species`, else `Annotation`, else `label`, or the one
  named). A table listing its recordings per selection (`Begin Path`, else `Begin File`: a
  combined table, BirdNET's or `birdjepa.predict --format raven`'s) takes each row's recording
  from there and its times from `File Offset (s)` (the start within that recording; `Begin Time
  (s)` is then a time on Raven's file sequence) when the column is there. A table without them is
  one recording's: the one named by `audio_for`, else the audio file named like the table
  without its `.selections.txt` and Raven's `.Table.<n>` (`rec1.Table.1.selections.txt` ->
  `rec1.wav`, `rec1.flac`, ...), found in `audio_dir` (default: the table's directory); a table
  with no selection still lists its recording (all of it is "nothing here"). Raven repeats each
  selection once per view (`Waveform 1`, `Spectrogram 1`) under one `Selection` number: a row
  that is the same selection (number, times, label and file) in another view is skipped,
  counted; anything else is kept (numbers restarting per recording in a combined table, two
  events under one number).
* CSV (`.csv`): columns `file`, `start`, `end`, `label` (names overridable). A row whose start,
  end and label are all empty lists a recording without events.

Relative audio paths resolve against `audio_dir`, or the table's own directory (after
`path_map`, birdjepa.data.paths' rule). A Windows path (`C:\\Users\\...`, `\\\\server\\share\\...`:
what Raven on Windows saves) is absolute: a `path_map` key naming its folder in either separator
and any case (Windows ignores it) maps it; an unmapped one is a problem that says which
`--path_map` would. Every problem (a missing column, a cell that is not a number, an end not
after its start, a file that does not exist, or is a FIFO or a directory) is one line naming the
table, the row (1 = the first row under the header; its line in the file is one more) and the column
or path; `read` gathers them all, and `raise_problems` raises them as one BadArgumentError."""

import csv
import dataclasses
import glob
import os
import pathlib
import re

import birdjepa.common.errors as errors
import birdjepa.data.paths as paths

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff")
RAVEN_LABELS = ("Species", "Annotation", "label")
"""Raven label columns tried in order when none is named."""
RAVEN_START, RAVEN_END, RAVEN_OFFSET = "Begin Time (s)", "End Time (s)", "File Offset (s)"
RAVEN_PATHS = ("Begin Path", "Begin File")
CSV_COLUMNS = {"file": "file", "start": "start", "end": "end", "label": "label"}
MAX_PROBLEMS = 30
"""Problem lines shown before the rest are counted."""


@dataclasses.dataclass(frozen=True)
class Columns:
    """Column names; "" takes the format's default (Raven: `Begin Time (s)`, `End Time (s)`, the
    first of RAVEN_LABELS present; CSV: file, start, end, label)."""

    label: str = ""
    start: str = ""
    end: str = ""
    file: str = ""


@dataclasses.dataclass(frozen=True)
class Event:
    """One annotated event: a recording (absolute path) and [start, end] seconds within it."""

    file: str
    start: float
    end: float
    label: str
    where: str
    """`TABLE: row N`, for messages."""


@dataclasses.dataclass
class Found:
    """What the tables hold: events, every recording they list, counts and problems."""

    events: list[Event] = dataclasses.field(default_factory=list)
    recordings: dict[str, str] = dataclasses.field(default_factory=dict)
    """Recording -> where it is first named (events or not)."""
    tables: int = 0
    repeats: int = 0
    """Raven rows repeating a selection for another view, skipped."""
    problems: list[str] = dataclasses.field(default_factory=list)
    spelling: dict[str, str] = dataclasses.field(default_factory=dict)
    """A recording's real path -> the first name a table gave it: a link and its target, or
    two spellings of one path, are one recording."""

    def problem(self, line: str) -> None:
        self.problems.append(line)

    def one(self, file: str) -> str:
        """`file` under the first name given to the same file (by its real path)."""
        return self.spelling.setdefault(os.path.realpath(file), file)


def find_tables(sources: list[str]) -> list[pathlib.Path]:
    """Tables named, and under directories (recursively) the `*.selections.txt` and `*.csv`
    files (a Raven file list, `*.list.txt`, is not a table)."""
    out = []
    for s in map(pathlib.Path, sources):
        if s.is_dir():
            out += sorted(p for p in s.rglob("*") if p.is_file() and (
                p.name.endswith(".selections.txt") or p.suffix.lower() == ".csv"))
        elif s.is_file():
            out.append(s)
        elif s.exists():
            raise errors.BadArgumentError(
                f"TABLE: expected an annotation table or a directory of them, got {str(s)!r}, "
                f"which is {paths.kind_of(s.stat())}")
        else:
            raise FileNotFoundError(f"TABLE: expected an annotation table or a directory of "
                                    f"them, got {str(s)!r}, which does not exist")
    if not out:
        raise FileNotFoundError(f"TABLE: expected Raven selection tables (*.selections.txt) or "
                                f"CSV files (*.csv), found none in {sources}")
    once = {}  # a table reached twice (a directory and the file in it) is read once
    for p in out:
        once.setdefault(os.path.realpath(p), p)
    return list(once.values())


def _text(path: pathlib.Path) -> str:
    data = path.read_bytes()
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 with its byte order mark (Windows)
        return data.decode("utf-16")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # Raven on Windows writes the system code page


def _number(found: Found, where: str, column: str, cell) -> float | None:
    try:
        x = float(cell)
    except (TypeError, ValueError):
        found.problem(f"{where}, column {column!r}: expected seconds (a number), got {cell!r}")
        return None
    if x != x or x in (float("inf"), float("-inf")) or x < 0:
        found.problem(f"{where}, column {column!r}: expected seconds >= 0, got {cell!r}")
        return None
    return x


WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")
"""A Windows absolute path: a drive (`C:\\`, `C:/`) or a UNC share (`\\\\server\\share`)."""


def map_windows(stored: str, path_map) -> str | None:
    """Windows path `stored` with the longest `path_map` key naming one of its folders replaced
    (keys compared with either separator and in any case), or None when no key does."""
    s = stored.replace("\\", "/")
    best = None
    for k, v in (path_map or {}).items():
        key = k.replace("\\", "/").rstrip("/")
        if WINDOWS_PATH.match(k) and (s.lower() == key.lower() or s.lower().startswith(
                key.lower() + "/")) and (best is None or len(key) > best[0]):
            best = (len(key), v.rstrip("/") + s[len(key):])
    return best and best[1]


def _audio(found: Found, stored: str, table: pathlib.Path, where: str, audio_dir: str,
           path_map) -> str | None:
    """The recording `stored` names (resolved), or None after a problem naming it."""
    if WINDOWS_PATH.match(stored):
        mapped = map_windows(stored, path_map)
        if mapped is None:
            folder = stored[:max(stored.rfind("\\"), stored.rfind("/"))] or stored
            found.problem(f"{where}: audio file {stored!r} is a Windows path; --path_map "
                          f"'{folder}=DIR' says where its folder is on this machine")
            return None
        stored, path_map = mapped, None
    path = paths.resolve(stored, str(table.parent), audio_dir, path_map)
    try:
        st = os.stat(path)
    except OSError:
        hint = ("--path_map OLD=NEW" if os.path.isabs(paths.map_path(stored, path_map))
                else "--audio_dir DIR")
        found.problem(f"{where}: audio file {path!r} does not exist (stored as {stored!r}; "
                      f"{hint} says where it is)")
        return None
    try:
        paths.usable(path, st, 0)
    except errors.Error as e:
        found.problem(f"{where}: {e}")
        return None
    return os.path.abspath(path)


def _recording_of(found: Found, table: pathlib.Path, audio_dir: str,
                  audio_for: dict[str, str]) -> str | None:
    """The one recording of a per-recording Raven table (module docstring)."""
    named = audio_for.get(str(table)) or audio_for.get(table.name) or \
        audio_for.get(str(table.absolute()))
    if named:  # a path on the command line: relative to the current directory
        return _audio(found, os.path.abspath(named), table, f"{table}: --audio_for",
                      audio_dir, None)
    stem = re.sub(r"\.Table\.\d+$", "", table.name.removesuffix(".txt").removesuffix(
        ".selections"))
    where = pathlib.Path(audio_dir or table.parent)
    if pathlib.Path(stem).suffix.lower() in AUDIO_SUFFIXES and (where / stem).exists():
        return _audio(found, os.path.abspath(where / stem), table, str(table), "", None)
    hits = sorted(p for p in where.glob(f"{glob.escape(stem)}.*")  # a FIFO too: named below
                  if p.suffix.lower() in AUDIO_SUFFIXES and p.exists() and not p.is_dir()
                  ) if where.is_dir() else []
    if len(hits) == 1:
        return _audio(found, os.path.abspath(hits[0]), table, str(table), "", None)
    got = "found " + ", ".join(p.name for p in hits) if hits else "found none"
    found.problem(f"{table}: expected one recording named {stem}.<{'|'.join(s[1:] for s in AUDIO_SUFFIXES)}> "
                  f"in {str(where)!r} for this table (no Begin Path column), {got}; name it "
                  f"with --audio_for {table.name}=AUDIO or --audio_dir DIR")
    return None


def _label(found: Found, where: str, column: str, cell) -> str | None:
    label = " ".join((cell or "").split())
    if not label:
        found.problem(f"{where}, column {column!r}: expected a label, got an empty cell")
        return None
    return label


def _event(found: Found, file: str | None, where: str, cells: dict, names: tuple,
           offset_column: str | None) -> None:
    """Add the event of one row: names = (start, end, label) columns; with `offset_column`
    the start within the recording is that column and the end keeps the row's length."""
    start_c, end_c, label_c = names
    a = _number(found, where, start_c, cells.get(start_c))
    b = _number(found, where, end_c, cells.get(end_c))
    label = _label(found, where, label_c, cells.get(label_c))
    at = _number(found, where, offset_column, cells.get(offset_column)) if offset_column else a
    if a is None or b is None or at is None or label is None:
        return
    if b <= a:
        found.problem(f"{where}, column {end_c!r}: expected an end after the start ({a:g} s), "
                      f"got {b:g} s")
        return
    if file is not None:
        found.events.append(Event(found.one(file), at, at + (b - a), label, where))


def _header(found: Found, table: pathlib.Path, have: list[str], need: list[str],
            hint: str = "") -> bool:
    missing = [c for c in need if c not in have]
    if missing:
        found.problem(f"{table}: expected column(s) {', '.join(map(repr, missing))}{hint}, got "
                      f"{', '.join(map(repr, have)) or 'an empty file'}")
    return not missing


def read_raven(found: Found, table: pathlib.Path, cols: Columns, audio_dir: str,
               audio_for: dict[str, str], path_map) -> None:
    lines = [ln for ln in _text(table).splitlines() if ln.strip()]
    header = [h.strip() for h in lines[0].split("\t")] if lines else []
    label_c = cols.label or next((c for c in RAVEN_LABELS if c in header), RAVEN_LABELS[0])
    names = (cols.start or RAVEN_START, cols.end or RAVEN_END, label_c)
    hint = "" if cols.label or label_c in header else \
        f" (a label column: {', '.join(RAVEN_LABELS)}, or name it with --label_column)"
    if not _header(found, table, header, list(names), hint):
        return
    path_c = next((c for c in RAVEN_PATHS if c in header), None)
    offset_c = RAVEN_OFFSET if path_c and RAVEN_OFFSET in header else None
    file = None if path_c else _recording_of(found, table, audio_dir, audio_for)
    if file is not None:
        found.recordings.setdefault(found.one(file), str(table))
    views: dict[tuple, set[str]] = {}  # a selection (number, times, label, file) -> its views
    for i, line in enumerate(lines[1:], 1):
        cells = dict(zip(header, (c.strip() for c in line.split("\t")), strict=False))
        sel = cells.get("Selection")
        selection = (sel, *(cells.get(c) for c in names), cells.get(path_c) if path_c else None)
        seen_in = views.setdefault(selection, set())
        view = cells.get("View", "")
        if sel and seen_in and view not in seen_in:  # the same selection in another view
            found.repeats += 1
            continue
        seen_in.add(view)
        where = f"{table}: row {i}"
        row_file = file
        if path_c:
            stored = cells.get(path_c) or ""
            if not stored:
                found.problem(f"{where}, column {path_c!r}: expected the recording, got an "
                              "empty cell")
                continue
            row_file = _audio(found, stored, table, f"{where}, column {path_c!r}", audio_dir,
                              path_map)
            if row_file is not None:
                found.recordings.setdefault(found.one(row_file), where)
        _event(found, row_file, where, cells, names, offset_c)


def read_csv(found: Found, table: pathlib.Path, cols: Columns, audio_dir: str,
             path_map) -> None:
    rows = list(csv.reader(_text(table).splitlines()))
    header = [h.strip() for h in rows[0]] if rows else []
    names = (cols.start or "start", cols.end or "end", cols.label or "label")
    if not _header(found, table, header, [cols.file or "file", *names]):
        return
    for i, row in enumerate(rows[1:], 1):
        if not any(c.strip() for c in row):
            continue
        cells = dict(zip(header, (c.strip() for c in row), strict=False))
        where = f"{table}: row {i}"
        file_c = cols.file or "file"
        if not cells.get(file_c):
            found.problem(f"{where}, column {file_c!r}: expected the recording, got an empty "
                          "cell")
            continue
        file = _audio(found, cells[file_c], table, f"{where}, column {file_c!r}", audio_dir,
                      path_map)
        if file is not None:
            found.recordings.setdefault(found.one(file), where)
        if not any(cells.get(c) for c in names):
            continue  # the recording, without events
        _event(found, file, where, cells, names, None)


def read(sources: list[str], cols: Columns = Columns(), *, audio_dir: str = "",
         audio_for: dict[str, str] | None = None, path_map=None) -> Found:
    """Every event and recording of the tables `sources` names (files or directories), and the
    problems found (`found.problems`; `raise_problems` raises them)."""
    found = Found()
    for table in find_tables(sources):
        found.tables += 1
        if table.suffix.lower() == ".csv":
            read_csv(found, table, cols, audio_dir, path_map)
        else:
            read_raven(found, table, cols, audio_dir, audio_for or {}, path_map)
    return found


def raise_problems(problems: list[str]) -> None:
    """One BadArgumentError listing `problems` one a line (the first MAX_PROBLEMS)."""
    if problems:
        more = len(problems) - MAX_PROBLEMS
        lines = problems[:MAX_PROBLEMS] + ([f"... and {more} more problem(s)"] if more > 0
                                           else [])
        raise errors.BadArgumentError("\n".join(lines))
