"""What an RLDS record holds beyond its numeric and image steps: each
feature's values checked against the kind features.json declares, an
episode's ``episode_metadata`` as JSON values, and per-step strings (such as
``language_instruction``) as indices into their distinct strings."""

import numpy as np

from ._common import LoaderError

_HOLDS = {"bytes_list": "bytes", "float_list": "floats", "int64_list": "integers"}


def feature_values(feature, dtype, here):
    """A ``tf.train.Example`` feature's values: a list of bytes where
    features.json declares strings (``dtype`` object), else a flat array of
    ``dtype``. A record holding bytes for numbers, or numbers for strings, is
    a LoaderError."""
    kind = feature.WhichOneof("kind")  # None: no values at all
    strings = dtype is object
    if kind is not None and (kind == "bytes_list") != strings:
        declared = "strings" if strings else "numbers"
        raise LoaderError(
            f"{here}: features.json declares {declared}; the record holds {_HOLDS[kind]}"
        )
    if strings:
        return list(feature.bytes_list.value)
    flat = feature.float_list.value if kind == "float_list" else feature.int64_list.value
    return np.asarray(flat).astype(dtype)


def episode_metadata(feature, leaves, here):
    """name -> this episode's value of each ``episode_metadata`` feature
    (``leaves``: name -> (shape, dtype)) as JSON: a str (the bytes as UTF-8),
    number or bool, or nested lists of them for a feature with a shape."""
    out = {}
    for name, (shape, dtype) in leaves.items():
        key = f"episode_metadata/{name}"
        f = feature.get(key)
        if f is None:
            raise LoaderError(f"{here}: no {key}")
        at = f"{here}, key {key!r}"
        values = feature_values(f, dtype, at)
        if dtype is object:
            values = np.array([_utf8(b, at) for b in values], dtype=object)
        try:
            out[name] = values.reshape(shape).tolist()
        except ValueError:
            raise LoaderError(
                f"{at}: {len(values)} values do not fill the shape {shape} features.json declares"
            ) from None
    return out


def episode_task(feature, leaves, here):
    """An episode's task: its first step's ``language_instruction`` as a
    str, or None where the record holds none (or features.json declares it
    as numbers). Held to the rule of a per-step string: a record holding
    numbers, or a string that is not UTF-8, is a LoaderError."""
    language = feature.get("steps/language_instruction")
    declared = leaves.get("language_instruction", ((), object, None))
    if language is None or declared[1] is not object:
        return None
    texts = feature_values(language, object, f"{here}, key 'language_instruction'")
    return _utf8(texts[0], f"{here}, key 'language_instruction'") if texts else ""


def string_steps(blobs, shape, here):
    """A per-step string feature's steps: (its distinct strings, in the order
    they first appear, and (n, *shape) int64, each step's index into them)."""
    size = int(np.prod(shape)) if shape else 1
    if len(blobs) % size:
        raise LoaderError(f"{here}: {len(blobs)} strings are not whole steps of {shape}")
    distinct, first, inverse = np.unique(
        np.array(blobs, dtype=object), return_index=True, return_inverse=True
    )
    order = np.argsort(first)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    strings = [_utf8(b, here) for b in distinct[order]]
    return strings, rank[inverse.reshape(-1)].reshape(-1, *shape)


class StringTables:
    """Each string key's distinct strings over the episodes kept, in the
    order they first appear (``store.info["strings"]``)."""

    def __init__(self, keys):
        self.tables = {key: {} for key in keys}

    def indices(self, key, strings, local):
        """An episode's ``local`` indices into its own ``strings`` as
        indices into the key's table (which gains the strings new to it)."""
        table = self.tables[key]
        lookup = np.array([table.setdefault(s, len(table)) for s in strings], dtype=np.int64)
        return lookup[local]

    def info(self):
        return {key: list(table) for key, table in self.tables.items()}


def _utf8(blob, here):
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LoaderError(f"{here}: a string is not UTF-8 ({e})") from None
