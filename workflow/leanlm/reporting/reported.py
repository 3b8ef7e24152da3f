"""The numbers the thesis prints (params/reported/<table>.csv), and the thesis's names for variants.

Each CSV mirrors the printed table's layout, one row per attention variant labelled as printed
("MHE-MUL"), so it can be checked against the thesis by eye; ``#`` lines say where it comes from.
Rendered tables show these beside the reproduced numbers.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from leanlm import paths
from leanlm.errors import LeanLMError

# Registry name -> the label the thesis prints. Order = the row order of the chapter 3 tables.
THESIS_LABELS: dict[str, str] = {
    "sha": "SHA",
    "mha": "MHA",
    "el_att": "EL-ATT",
    "mqa": "MQA",
    "skv": "SKV",
    "fnet": "FNET",
    "linear": "LINEAR",
    "mhe_add": "MHE-ADD",
    "mhe_mul": "MHE-MUL",
}
THESIS_ORDER: list[str] = list(THESIS_LABELS)

_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9}


def thesis_label(name: str) -> str:
    """The printed label of a variant (``mhe_mul`` -> ``MHE-MUL``); unknown names are upper-cased."""
    return THESIS_LABELS.get(name, name.upper().replace("_", "-"))


def order_key(name: str) -> tuple[int, str]:
    """Sort key putting variants in the thesis's row order, unknown ones last (alphabetically)."""
    return (THESIS_ORDER.index(name) if name in THESIS_ORDER else len(THESIS_ORDER), name)


def parse_count(text: str) -> float:
    """A printed parameter count as a number: ``"28.32M"`` -> 28320000.0; empty/``-`` -> NaN."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return math.nan
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMB]?)\s*", str(text))
    if not match:
        if str(text).strip() in {"", "-"}:
            return math.nan
        raise LeanLMError(f"cannot read the printed count {text!r}; expected e.g. 8.85M, 99.1K or 1234")
    return float(match.group(1)) * _SCALE[match.group(2)]


def reported_path(name: str):
    return paths.params_dir() / "reported" / f"{name}.csv"


def load_reported(name: str) -> pd.DataFrame:
    """The thesis's printed values for table ``name``, indexed by the printed attention label."""
    path = reported_path(name)
    if not path.is_file():
        raise LeanLMError(
            f"{path} does not exist: transcribe the thesis's {name} into it (see the other "
            "params/reported/*.csv files for the layout)"
        )
    df = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)
    # The first column holds the printed row label ("attention" in ch. 3, "model" in ch. 2, ...).
    key = df.columns[0]
    if key not in ("attention", "model", "row"):
        raise LeanLMError(f"{path}: the first column must be the printed row label, named attention, "
                          f"model or row; got {key!r}")
    if df[key].duplicated().any():
        raise LeanLMError(f"{path}: {key} labels repeat: {sorted(df[key][df[key].duplicated()])}")
    for column in df.columns[1:]:  # numeric columns back to numbers; printed counts stay text
        numeric = pd.to_numeric(df[column].replace("", None), errors="coerce")
        if numeric.notna().sum() == (df[column] != "").sum():
            df[column] = numeric
    return df.set_index(key)


def reported_row(df: pd.DataFrame, name: str) -> pd.Series | None:
    """The reported row of variant ``name`` (a registry name), or None where the thesis has none."""
    label = thesis_label(name)
    return df.loc[label] if label in df.index else None
