"""An RLDS dataset's ``features.json`` (a TFDS FeaturesDict as JSON): the
leaves under ``steps`` (one value a step) and under ``episode_metadata``
(one value an episode), with their shapes, dtypes and image encodings."""

import numpy as np

from ._common import LoaderError

_DTYPES = {
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
    "string": object,
}
# TFDS feature kinds load_rlds does not read (a leaf of these is left out);
# a leaf of no kind TFDS writes is an error: features.json is corrupt.
_OTHER_KINDS = (
    "classLabel",
    "video",
    "audio",
    "boundingBox",
    "translation",
    "translationVariableLanguages",
    "sequence",
    "jsonFeature",
)


def leaf_features(spec, where, root, prefix=""):
    """(path, shape, dtype, image encoding or None) of every leaf under a
    TFDS FeaturesDict JSON that load_rlds reads; ``root`` (``"steps"``) names
    the dict in errors. Strings (text, or tensors of dtype string) have the
    dtype ``object``."""
    out = []
    for name, feature in spec["featuresDict"]["features"].items():
        path = prefix + name
        if "featuresDict" in feature:
            out += leaf_features(feature, where, root, path + "/")
        elif "image" in feature:
            image = feature["image"]
            shape = tuple(int(d) for d in image["shape"]["dimensions"])
            out.append((path, shape, np.uint8, image.get("encodingFormat", "png")))
        elif "tensor" in feature:
            tensor = feature["tensor"]
            shape = tuple(int(d) for d in tensor["shape"].get("dimensions", []))
            if tensor["dtype"] not in _DTYPES:
                raise LoaderError(
                    f"{where}: features.json gives {root}/{path} the dtype {tensor['dtype']!r}; "
                    f"load_rlds reads {sorted(_DTYPES)}"
                )
            out.append((path, shape, _DTYPES[tensor["dtype"]], None))
        elif "text" in feature:
            out.append((path, (), object, None))
        elif not any(kind in feature for kind in _OTHER_KINDS):
            raise LoaderError(
                f"{where}: features.json gives {root}/{path} no feature kind TFDS writes "
                f"(its keys: {sorted(feature)})"
            )
    return out


def step_features(features, where):
    """path -> (shape, dtype, image encoding or None) of each step feature."""
    try:
        steps = features["featuresDict"]["features"]["steps"]
        spec = steps["sequence"]["feature"]
    except KeyError as e:
        raise LoaderError(f"{where}: features.json has no steps sequence ({e})") from e
    return {
        path: (shape, dtype, encoding)
        for path, shape, dtype, encoding in leaf_features(spec, where, "steps")
    }


def metadata_features(features, where):
    """path -> (shape, dtype) of each ``episode_metadata`` feature load_rlds
    keeps (numbers, bools and strings; images are left out), or {} where
    features.json declares none."""
    spec = features["featuresDict"]["features"].get("episode_metadata")
    if spec is None:
        return {}
    if "featuresDict" not in spec:
        raise LoaderError(
            f"{where}: features.json gives episode_metadata no featuresDict "
            f"(its keys: {sorted(spec)})"
        )
    return {
        path: (shape, dtype)
        for path, shape, dtype, encoding in leaf_features(spec, where, "episode_metadata")
        if encoding is None
    }
