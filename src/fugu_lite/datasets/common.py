"""Small checks shared by the importers; every error names the file and the row."""

from __future__ import annotations

import logging
import math
import numbers
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ..io import describe_validation_error
from ..number_text import number_hint, to_float
from ..schemas import RewardRecord, prompt_hash
from ..text_reading import RecordFileError
from .split import PLACEHOLDER_SPLIT, no_value

logger = logging.getLogger(__name__)

MissingPolicy = Literal["error", "drop"]
MISSING_POLICIES: tuple[str, ...] = ("error", "drop")


CSV_QUOTING_HINT = (
    "check the quoting there: a field holding a comma, a quote or a line break must be in "
    'double quotes, inner quotes doubled ("")'
)


# How to make the CSV the importers read from a table of another kind (pandas keeps its text
# as text with dtype=str: 007 stays 007)
SPREADSHEET_TO_CSV = (
    "save the sheet as CSV (UTF-8) from the spreadsheet, or run "
    "pandas.read_excel('{name}', dtype=str).to_csv('{stem}.csv', index=False)"
)
TO_CSV: dict[str, str] = {
    ".xlsx": SPREADSHEET_TO_CSV,
    ".xls": SPREADSHEET_TO_CSV,
    ".ods": SPREADSHEET_TO_CSV,
    ".tsv": "write it with commas: pandas.read_csv('{name}', sep='\\t', dtype=str, "
    "keep_default_na=False).to_csv('{stem}.csv', index=False)",
    ".parquet": "write it as CSV: pandas.read_parquet('{name}').to_csv('{stem}.csv', index=False)",
    ".feather": "write it as CSV: pandas.read_feather('{name}').to_csv('{stem}.csv', index=False)",
}


def to_csv_hint(path: Path) -> str:
    """For a table of a kind no importer reads (a spreadsheet, a TSV, Parquet), how to make
    its CSV; "expected a .csv ... file" alone left the user to find out."""
    advice = TO_CSV.get(path.suffix.lower())
    return "; " + advice.format(name=path.name, stem=path.stem) if advice else ""


def compressed_file_advice(error: Exception, compression: str) -> str:
    """What to do about a compressed file that could not be read: one that ends before its
    compressed data does was cut short (an interrupted download or copy), which "is it really
    .gz-compressed?" did not say; anything else may be another format under the name."""
    if isinstance(error, EOFError):
        return CUT_SHORT_ADVICE
    return f"is it really {compression}-compressed?"


CUT_SHORT_ADVICE = (
    "the file ends before its data does, so it was cut short (an interrupted download or "
    "copy?): fetch or copy it again"
)


def other_separator_hint(header: Sequence[str], what: str) -> str:
    """For a CSV header read as one column holding `;`, a tab or `|`: the file is separated
    by another character (a spreadsheet in a decimal-comma locale writes `;`), and `what`
    ("the long format's CSV") is separated by commas."""
    if len(header) == 1 and any(separator in header[0] for separator in ";\t|"):
        return (
            f"; the header is one column: {what} is separated by commas (save it again as CSV "
            "with commas)"
        )
    return ""


EXCEL_SEPARATOR_LINE = re.compile(r"\s*sep=.[ \t]*", re.IGNORECASE)


def is_separator_line(cells: Sequence[str]) -> bool:
    """Excel's "sep=," line before a CSV's header (it tells Excel the separator), as cells."""
    return EXCEL_SEPARATOR_LINE.fullmatch(",".join(cells).removeprefix("\ufeff")) is not None


def csv_line_breaks(text: str) -> str:
    """A quoted CSV field's line breaks as `\n`: a file saved with CRLF line ends (Excel,
    Windows editors, git's autocrlf) holds them as `\r\n` inside fields too, which made
    another prompt (hash, id, split, features) than the same file's LF copy."""
    return text.replace("\r\n", "\n")


def repeated_header(where: str) -> RecordFileError:
    """A CSV row that repeats the header: files joined with `cat` (it failed as a cell that
    is no number, e.g. "reward must be a finite number, got 'reward'")."""
    return RecordFileError(
        f"{where}: repeats the header line (files joined with `cat`?); delete that line, or "
        "join the files keeping one header (e.g. pandas.concat, or `tail -n +2` for all files "
        "after the first)"
    )


def is_header_copy(cells: Sequence[object], header: Sequence[object]) -> bool:
    """Whether a row's cells are the header's names (without case and surrounding spaces, and
    without the empty cells a spreadsheet leaves at a row's end)."""
    return _folded(cells) == _folded(header)


def folded_name(cell: object) -> str:
    """A header cell as names are compared; a second file's header starts with its own BOM
    when files saved with one are joined."""
    return str(cell).removeprefix("\ufeff").strip().casefold()


def _folded(cells: Sequence[object]) -> list[str]:
    folded = [folded_name(cell) for cell in cells]
    while folded and not folded[-1]:
        folded.pop()
    return folded


def short(text: str, limit: int = 60) -> str:
    """A prompt shortened for an error message."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 3] + "...")


def stable_id(prefix: str, prompt_text: str) -> str:
    """An id derived from the prompt itself, so it survives reordering and re-export."""
    return f"{prefix}:{prompt_hash(prompt_text)[:16]}"


def check_missing_policy(on_missing: str) -> MissingPolicy:
    if on_missing not in MISSING_POLICIES:
        raise ValueError(
            f"on_missing={on_missing!r} is not known; use one of {', '.join(MISSING_POLICIES)}"
        )
    return on_missing  # type: ignore[return-value]


# with Excel's #N/A (a lookup that found nothing), which pandas reads as missing too
BLANKS: tuple[str, ...] = (
    "", "nan", "na", "<na>", "n/a", "null", "none", "nat", "#n/a", "#na", "#n/a n/a",
)  # fmt: skip


def is_blank(value: object) -> bool:
    """No value: None, NaN, or a text that spreadsheets and pandas write for one ("", "NA")."""
    if isinstance(value, float):
        return math.isnan(value)
    return value is None or (isinstance(value, str) and value.strip().lower() in BLANKS)


def require_float(value: object, what: str, where: str, minimum: float | None = None) -> float:
    number = to_float(value)
    if number is None:
        raise RecordFileError(
            f"{where}: {what} must be a finite number, got {value!r}{number_hint(value)}"
        )
    if minimum is not None and number < minimum:
        raise RecordFileError(f"{where}: {what} must be at least {minimum}, got {number}")
    return number


def id_text(value: object) -> str:
    """A record id as text, stripped. A whole number stored as a float (1.0: pandas stores an
    integer column with a gap as floats, and JSON and pickles keep them so) is the id of the
    integer ("1"), as the same file without the gap gives; an id written as text is kept."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        number = float(value)
        if number.is_integer():
            return str(int(number))
    return str(value).strip()


def require_text(value: object, what: str, where: str) -> str:
    if isinstance(value, str) and value.strip():
        return value
    if no_value(value):
        # an empty cell (a spreadsheet's blank row, a pickle's NaN, None or NA): say what to
        # do about it
        raise RecordFileError(f"{where}: {what} is empty ({value!r}); fill it in or delete the row")
    raise RecordFileError(f"{where}: {what} must be a non-empty string, got {value!r}")


def unicode_text(text: str, what: str, where: str) -> str:
    """The text, where it is Unicode: a pickle's string may hold a lone surrogate ("\\ud83d",
    half an emoji), which no UTF-8 file can; hashing the prompt or writing the records failed
    with a UnicodeEncodeError naming no row."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        bad = error.object[error.start : error.end].encode("unicode_escape").decode("ascii")
        raise RecordFileError(
            f"{where}: {what} holds a lone UTF-16 surrogate ({bad}), which is not Unicode text "
            "(half of a pair, such as an emoji cut in two); fix the text in the table"
        ) from error
    return text


def refuse_control_characters(name: str, what: str, where: str, advice: str) -> None:
    """A model's or worker's name holding a control character (a NUL, a terminal's colour code
    ESC, DEL, an inner tab), as a pickle's column, a raw table's model_name cell or a long
    file's worker cell may: it was imported as a worker of that name, which no pool's worker
    id can match. `advice` says where to rename it."""
    control = next((char for char in name if unicodedata.category(char) == "Cc"), None)
    if control is not None:
        raise RecordFileError(
            f"{where}: {what} {name!r} holds the control character U+{ord(control):04X}, "
            f"which no worker's name can hold: {advice}"
        )


def build_record(where: str, **fields: Any) -> RewardRecord:
    """A RewardRecord with the placeholder split; a schema error names the row."""
    try:
        return RewardRecord(split=PLACEHOLDER_SPLIT, **fields)
    except ValidationError as error:
        problems = describe_validation_error(error)
        raise RecordFileError(f"{where}: not a valid record: {problems}") from error


@dataclass
class ImportedRecords:
    """An importer's records in file order, each with its split cell (read when the file's
    own split is used) and the row it came from, which a bad split cell is named by."""

    records: list[RewardRecord] = field(default_factory=list)
    splits: list[object] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def add(self, record: RewardRecord, split: object, where: str) -> None:
        self.records.append(record)
        self.splits.append(split)
        self.names.append(where)


def refuse_a_record_or_task_row(row: dict, where: str) -> None:
    """A row of reward records (what `data import` writes) or of tasks given to an importer
    was told to rename its keys to the long format's, or that its scores were None."""
    if "worker_ids" in row and "rewards" in row:
        raise RecordFileError(
            f"{where}: this is a RewardRecord (it has 'worker_ids' and 'rewards'): the file "
            "holds records already, as `data import` writes them; give it as it is to train, "
            "eval or `data stats` (-r FILE), with no import"
        )
    if "grader" in row and not {"worker", "reward", "scores"} & set(row):
        raise RecordFileError(
            f"{where}: this is a task (it has 'grader'), not a row of rewards: the workers "
            "answer a task file in `fugu-lite collect --tasks FILE`, which writes the records; "
            "it is not imported"
        )


def check_split_column(split_column: str | None) -> None:
    """A blank split_column (`--option split_column=$SPLIT` with the variable unset) names no
    column: RouterBench failed with "KeyError: ''", ZeroEval said every row had no split."""
    if split_column is not None and not split_column.strip():
        raise ValueError(
            f"split_column={split_column!r} names no column; give the name of the file's split "
            "column (e.g. split_column=split), or leave the option out to get the standard split"
        )


def warn_unused_split_column(path: Path, option: str) -> None:
    """The file has its own split column, but the standard split was asked for (the default):
    say so, since a held-out test split of the user's would otherwise reach training."""
    logger.warning(
        "%s has a split column, which is not used: the standard split applies (pass --option "
        "%s to keep the file's split)",
        path, option,
    )  # fmt: skip


def known_column_names(names: Sequence[str], known: Sequence[str], where: str) -> list[str]:
    """The names as read: a known column's name in any case and with surrounding spaces
    (`Cost`, ` cost`) is that column; the others stay as they are. Two names of one column
    are an error (which one to read is not known)."""
    read = []
    for name in names:
        folded = name.strip().casefold()
        read.append(folded if folded in known else name)
    repeated = sorted({column for column in read if column in known and read.count(column) > 1})
    if repeated:
        spellings = [name for name, column in zip(names, read, strict=True) if column in repeated]
        raise RecordFileError(
            f"{where}: the column(s) {repeated} are named more than once ({spellings}); keep "
            "one of each"
        )
    return read
