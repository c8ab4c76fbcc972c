"""Reading text tables (TSV, CSV, JSON Lines) with errors that name the file, the line and the column.

Every reader here returns :class:`Table`: the header (column names) and the records, each record
a ``dict`` from column name to value together with the 1-based line number it started on, so that
the loaders above can say exactly where a bad label or a missing field is.

Conventions
- Files are decoded as strict UTF-8. A UTF-8 byte-order mark at the start is dropped (the GLUE
  MRPC files start with one). Undecodable bytes raise :class:`DataError` with the byte offset,
  the line and the offending bytes.
- ``.gz`` files are decompressed first (the bundled sample is stored that way); the format is
  taken from the suffix before ``.gz``.
- TSV is split on tabs with ``csv.QUOTE_NONE``: a quote character is an ordinary character.
  This is how the GLUE TSVs must be read (MRPC, MNLI and QQP contain unbalanced ``"``), and each
  record is exactly one line.
- CSV uses the standard dialect (``"`` quotes fields; a quoted field may span lines).
- JSON Lines: one JSON object per non-blank line; the header is the keys of the first object.
- Blank lines are skipped. A file with no header line, or a header and no record, is "empty".
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from raptor.errors import DataError

UTF8_BOM = b"\xef\xbb\xbf"

#: largest CSV/TSV field accepted (the csv module's default is 128 KB)
FIELD_SIZE_LIMIT = 2**31 - 1

#: file suffix -> format name
FORMATS: dict[str, str] = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}


@dataclass(frozen=True)
class Record:
    """One row of a table: its 1-based starting line in the file and its fields by column name."""

    line: int
    fields: dict


@dataclass(frozen=True)
class Table:
    """A parsed file: where it came from, its column names and its records (in file order)."""

    name: str
    columns: tuple[str, ...]
    records: tuple[Record, ...]

    def require_columns(self, wanted: Sequence[str], *, role: str = "column") -> None:
        """Raise :class:`DataError` naming the first of ``wanted`` that the header lacks."""
        for column in wanted:
            if column not in self.columns:
                found = ", ".join(repr(c) for c in self.columns)
                raise DataError(
                    f"{self.name}: missing {role} {column!r}; the header has {found}. "
                    f"Check the column name (it is case-sensitive) or the file."
                )


def file_format(path: str | Path) -> str:
    """``"tsv"``, ``"csv"`` or ``"jsonl"`` from the file suffix (a trailing ``.gz`` is ignored)."""
    p = Path(path)
    suffix = Path(p.stem).suffix if p.suffix == ".gz" else p.suffix
    fmt = FORMATS.get(suffix.lower())
    if fmt is None:
        raise DataError(
            f"{p}: unknown file type {suffix or '(no suffix)'!r}; expected one of "
            f"{', '.join(sorted(FORMATS))} (optionally followed by .gz)"
        )
    return fmt


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, decompressed if it ends in ``.gz``; :class:`DataError` if it is missing."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found; check the path (relative paths start at {Path.cwd()})")
    if p.is_dir():
        inside = sorted(c.name for c in p.iterdir() if c.is_file() and c.suffix.lower() in FORMATS)[:3]
        hint = f" such as {p / inside[0]}" if inside else ""
        raise DataError(f"{p}: is a directory, not a file; give a CSV/TSV/JSONL file{hint} (a GLUE directory "
                        "goes with --task T --data-dir DIR)")
    if not p.is_file():  # a FIFO would block the read forever; a device never ends
        raise DataError(f"{p}: is not a regular file (a FIFO, socket or device); give a CSV/TSV/JSONL file")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise DataError(f"{p}: cannot be read ({err.strerror or err}); check the file's permissions") from err
    if p.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise DataError(f"{p}: not a valid gzip file ({err}); re-compress it or drop the .gz suffix") from err
        kind = sniff_binary(data)
        if kind is not None:
            raise DataError(f"{p}: the decompressed data {kind}, not a CSV/TSV/JSONL text file")
        return data
    kind = sniff_binary(data)
    if kind == GZIP_KIND:
        raise DataError(f"{p}: is gzip-compressed data; name it {p.name}.gz (or decompress it: gunzip -c)")
    if kind is not None:
        raise DataError(f"{p}: {kind}, not a CSV/TSV/JSONL text file; export the data as UTF-8 CSV, TSV or JSON "
                        "Lines")
    return data


GZIP_KIND = "is gzip-compressed data"

#: leading bytes of common binary formats -> what to call the file
MAGIC_BYTES: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", GZIP_KIND),
    (b"PK\x03\x04", "is a zip archive (an .xlsx, .docx or .zip file)"),
    (b"PK\x05\x06", "is an (empty) zip archive"),
    (b"\x7fELF", "is an ELF executable (a program)"),
    (b"%PDF", "is a PDF document"),
    (b"PAR1", "is a Parquet file"),
    (b"ARROW1", "is an Arrow file"),
    (b"\x89PNG\r\n\x1a\n", "is a PNG image"),
    (b"\xff\xd8\xff", "is a JPEG image"),
    (b"SQLite format 3\x00", "is an SQLite database"),
    (b"BZh", "is bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "is xz-compressed data"),
    (b"\x93NUMPY", "is a NumPy array file"),
)


def sniff_binary(data: bytes) -> str | None:
    """What a binary file is, from its magic bytes (``"is a PDF document"``), or None for other data."""
    for magic, kind in MAGIC_BYTES:
        if data.startswith(magic) and (magic != b"BZh" or data[3:4].isdigit()):
            return kind
    return None


def decode_utf8(data: bytes, name: str) -> str:
    """Strict UTF-8 decoding; a leading byte-order mark is dropped.

    An undecodable byte sequence raises :class:`DataError` giving its byte offset (from the start
    of the file, BOM included), its line and column, and the bytes themselves.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data[:4096]:
        raise DataError(
            f"{name}: the file looks like UTF-16 (a UTF-16 byte-order mark or NUL bytes); raptor reads UTF-8. "
            "Re-save it as UTF-8 (for example `iconv -f utf-16 -t utf-8 IN > OUT`)."
        )
    skip = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as err:
        offset = skip + err.start
        line = data.count(b"\n", 0, offset) + 1
        line_start = data.rfind(b"\n", 0, offset) + 1
        bad = data[offset : offset + max(1, err.end - err.start)]
        raise DataError(
            f"{name}: line {line}: undecodable bytes {bad!r} at byte offset {offset} "
            f"(byte {offset - line_start + 1} of the line): {err.reason}. The file must be UTF-8; "
            f"re-save it as UTF-8 (for example `iconv -f latin1 -t utf-8`)."
        ) from err


def _rows_delimited(text: str, name: str, fmt: str):
    """Yield ``(start_line, cells)`` for each non-blank row of a TSV/CSV text."""
    if fmt == "tsv":
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    old_limit = csv.field_size_limit(FIELD_SIZE_LIMIT)  # the default (128 KB) calls a long valid field malformed
    try:
        for cells in reader:
            line = start
            start = reader.line_num + 1
            if not cells or cells == [""]:
                continue
            yield line, cells
    except csv.Error as err:
        raise DataError(f"{name}: line {reader.line_num}: malformed {fmt.upper()} ({err})") from err
    finally:
        csv.field_size_limit(old_limit)


def parse_delimited(text: str, name: str, fmt: str, *, columns: Sequence[str] | None = None) -> Table:
    """Parse TSV/CSV ``text``. The first non-blank row is the header unless ``columns`` is given.

    Every record must have as many fields as the header; otherwise :class:`DataError` names the
    line, the expected and the found number of fields.
    """
    rows = _rows_delimited(text, name, fmt)
    if columns is None:
        first = next(rows, None)
        if first is None:
            raise DataError(f"{name}: file is empty; expected a header line and at least one record")
        columns = tuple(c.strip() for c in first[1])
        duplicates = sorted({c for c in columns if columns.count(c) > 1})
        if duplicates:
            raise DataError(f"{name}: line {first[0]}: duplicate column name(s) {duplicates} in the header")
    columns = tuple(columns)
    sep = "tab" if fmt == "tsv" else "comma"
    records = []
    for line, cells in rows:
        if len(cells) != len(columns):
            raise DataError(
                f"{name}: line {line}: expected {len(columns)} {sep}-separated fields "
                f"({', '.join(columns)}), found {len(cells)}"
            )
        records.append(Record(line, dict(zip(columns, cells))))
    if not records:
        raise DataError(f"{name}: file is empty: it has a header ({', '.join(columns)}) but no records")
    return Table(name, columns, tuple(records))


def parse_jsonl(text: str, name: str) -> Table:
    """Parse JSON Lines ``text``: one object per non-blank line; the header is the first object's keys."""
    records = []
    columns: tuple[str, ...] | None = None
    # split on "\n" only: str.splitlines() also splits on U+2028, U+0085 and others, valid inside a JSON string
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw, object_pairs_hook=_no_duplicate_keys)
        except _DuplicateKey as dup:
            raise DataError(f"{name}: line {number}: duplicate key {dup.key!r} in one JSON object (JSON keeps "
                            "only the last value); keep one") from None
        except json.JSONDecodeError as err:
            if not records:
                _refuse_json_document(text, name)
            raise DataError(f"{name}: line {number}, column {err.colno}: invalid JSON ({err.msg})") from err
        if not isinstance(obj, dict):
            raise DataError(f"{name}: line {number}: expected a JSON object, found {type(obj).__name__}")
        if columns is None:
            columns = tuple(obj)
        records.append(Record(number, obj))
    if not records:
        raise DataError(f"{name}: file is empty; expected one JSON object per line")
    return Table(name, columns or (), tuple(records))


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _refuse_json_document(text: str, name: str) -> None:
    """:class:`DataError` when the whole text is one JSON document (a pretty-printed array or object)
    rather than JSON Lines; returns otherwise."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return
    what = "a JSON array" if isinstance(doc, list) else f"one JSON {type(doc).__name__}"
    raise DataError(f"{name}: the file is {what} spread over {text.count(chr(10)) + 1} lines; raptor reads JSON "
                    "Lines (one JSON object per line). Convert it, e.g. `jq -c '.[]' IN > OUT.jsonl`")


def read_table(path: str | Path, *, fmt: str | None = None, columns: Sequence[str] | None = None) -> Table:
    """Read a TSV, CSV or JSON Lines file (format from the suffix unless ``fmt`` is given).

    ``columns`` names the columns of a header-less TSV/CSV file (then every row is a record).
    """
    if not Path(path).is_file():
        read_bytes(path)  # the missing-file or directory message, before the suffix is looked at
    fmt = fmt or file_format(path)
    name = str(path)
    text = decode_utf8(read_bytes(path), name)
    if fmt == "jsonl":
        return parse_jsonl(text, name)
    return parse_delimited(text, name, fmt, columns=columns)


def read_text_lines(path: str | Path) -> tuple[str, ...]:
    """The non-blank lines of a UTF-8 text file (one text per line), stripped; an empty file is an error."""
    name = str(path)
    texts = tuple(line.strip() for line in decode_utf8(read_bytes(path), name).splitlines() if line.strip())
    if not texts:
        raise DataError(f"{name}: no text lines; expected one text per line")
    return texts
