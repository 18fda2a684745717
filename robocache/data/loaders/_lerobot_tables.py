"""The tables of a LeRobot v3 dataset (pyarrow): meta/episodes and the data
files, read and checked (columns present, typed and null-free, each
episode's rows its own, times that never go back)."""

import os

import numpy as np
import torch

from ..time import times_to_ns
from ._common import LoaderError, reading

BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")
_VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


def seconds_as_ns(seconds, where):
    """LeRobot's float32 seconds (and PyAV's frame times) as int64 ns: each
    value as its float64 reading, rounded to ns."""
    seconds = torch.from_numpy(np.array(seconds, dtype=np.float64))  # a copy: writable
    try:
        return times_to_ns(seconds, where).numpy()
    except ValueError as e:
        raise LoaderError(str(e)) from e


def column(table, name, n, shape, where):
    """A column of fixed-size lists (or scalars) as an (n, *shape) array."""
    import pyarrow.types as pat

    flat = table.column(name).combine_chunks()
    while (
        pat.is_list(flat.type) or pat.is_fixed_size_list(flat.type) or pat.is_large_list(flat.type)
    ):
        flat = flat.flatten()
    values = flat.to_numpy(zero_copy_only=False)
    try:
        return values.reshape(n, *shape)
    except ValueError as e:
        raise LoaderError(
            f"{where}, key {name!r}: {values.size} values do not make {n} rows of {shape}"
        ) from e


def columns_as(table, types, name, where):
    """Each column ``types`` names is in the table, of that kind ("int",
    "number", "tasks": a list of strings, "any") and without nulls: a parquet
    footer has no checksum, and a changed byte there can drop a column or
    change its type without an error from pyarrow."""
    import pyarrow.types as pat

    kinds = {
        "int": pat.is_integer,
        "number": lambda t: pat.is_integer(t) or pat.is_floating(t),
        "tasks": lambda t: (
            (pat.is_list(t) or pat.is_large_list(t))
            and (pat.is_string(t.value_type) or pat.is_large_string(t.value_type))
        ),
        "any": lambda t: True,
    }
    with reading(where, f"{name}'s schema"):  # a name that is not UTF-8 fails here
        names = set(table.column_names)
    for column, kind in types.items():
        if column not in names:
            raise LoaderError(f"{where}: {name} has no column {column!r}")
        field = table.schema.field(column)
        if not kinds[kind](field.type):
            raise LoaderError(f"{where}: {name}, column {column!r} is {field.type}, not {kind}")
        if table.column(column).null_count:
            raise LoaderError(f"{where}: {name}, column {column!r} holds nulls")


def episode_rows_of_meta(root, paths, keys, videos, info, where):
    """The rows of meta/episodes, in episode order, checked against each
    other and against info.json's total_episodes."""
    types = dict.fromkeys(
        ["episode_index", "length", "dataset_from_index", "dataset_to_index"], "int"
    )
    types["tasks"] = "tasks"
    if len(videos) < len(keys):
        types.update(dict.fromkeys(["data/chunk_index", "data/file_index"], "int"))
    for key in videos:
        for column in _VIDEO_COLUMNS:
            types[f"videos/{key}/{column}"] = "int" if column.endswith("index") else "number"
    episodes = []
    for path in paths:
        name = os.path.relpath(path, root)
        table = read_parquet(path, where, name)
        columns_as(table, types, name, where)
        with reading(where, name):
            episodes += table.select(list(types)).to_pylist()
    episodes.sort(key=lambda row: row["episode_index"])
    indices = [row["episode_index"] for row in episodes]
    if len(set(indices)) < len(indices):
        twice = next(i for i, j in zip(indices, indices[1:]) if i == j)
        raise LoaderError(f"{where}: meta/episodes lists episode {twice} twice")
    total = info.get("total_episodes")
    if isinstance(total, int) and total != len(episodes):
        # A parquet footer's row count has no checksum: pyarrow reads that many rows.
        raise LoaderError(
            f"{where}: meta/episodes lists {len(episodes)} episodes, info.json's "
            f"total_episodes says {total}"
        )
    for row in episodes:
        if row["length"] != row["dataset_to_index"] - row["dataset_from_index"]:
            raise LoaderError(
                f"{where}, episode {row['episode_index']}: length {row['length']}, but rows "
                f"{row['dataset_from_index']} to {row['dataset_to_index']} in meta/episodes"
            )
    return episodes


def dataset_file(root, info, template, where, **fields):
    """The path info.json's ``template`` (data_path, video_path) gives."""
    with reading(where, f"meta/info.json's {template}"):
        return os.path.join(root, info[template].format(**fields))


def read_parquet(path, where, name):
    """A parquet file as a table. Pages that carry a CRC (pyarrow writes them
    with ``write_page_checksum=True``) are verified."""
    import pyarrow.parquet as pq

    with reading(where, name):
        return pq.read_table(path, page_checksum_verification=True)


def episode_rows(table, row, where):
    """An episode's rows of its data file, and their times (int64 ns). The
    file's bookkeeping columns must agree with meta/episodes: ``index`` runs
    on from ``dataset_from_index``, ``episode_index`` is the episode's,
    ``frame_index`` counts from 0 and ``timestamp`` never goes back."""
    e, n, begin = row["episode_index"], row["length"], row["dataset_from_index"]
    with reading(where, "the columns index, episode_index, frame_index and timestamp"):
        index = table.column("index")
        first = index[0].as_py() if len(index) else begin
        rows = table.slice(begin - first, n) if begin >= first else table.slice(0, 0)
        if rows.num_rows != n:
            raise LoaderError(f"{where}: the data file holds {rows.num_rows} of its {n} rows")
        columns = {c: rows.column(c).to_numpy() for c in BOOKKEEPING[:4]}
    for name, expected in (
        ("index", np.arange(begin, begin + n)),
        ("episode_index", np.full(n, e)),
        ("frame_index", np.arange(n)),
    ):
        wrong = np.nonzero(columns[name] != expected)[0]
        if len(wrong):
            i = int(wrong[0])
            raise LoaderError(
                f"{where}, column {name!r}: row {i} of the episode holds {columns[name][i]}, "
                f"not {expected[i]} (meta/episodes and the data file disagree)"
            )
    back = np.nonzero(np.diff(columns["timestamp"]) < 0)[0]
    if len(back):
        i = int(back[0]) + 1
        raise LoaderError(
            f"{where}, column 'timestamp': times go backwards at frame {i} "
            f"({columns['timestamp'][i]} s after {columns['timestamp'][i - 1]} s)"
        )
    return rows, seconds_as_ns(columns["timestamp"], f"{where}, column 'timestamp'")
