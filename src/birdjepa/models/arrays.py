"""A Module's arrays by name: `leaf_paths` (every array under its dotted path, e.g.
"blocks.wq.w", as export writes them to safetensors) and `fill` (a skeleton's leaves replaced by
named arrays, as an export or an imported model is read back). Used by the exporter and by every
importer."""

import jax
import jax.numpy as jnp
import numpy as np


class ConversionError(ValueError):
    """A checkpoint that does not convert; the message lists every missing and unexpected key
    and every shape mismatch."""


def fill(skel, values: dict[str, np.ndarray]):
    """`skel` (arrays or ShapeDtypeStructs) with each leaf at dotted path replaced by its value;
    every leaf must be given, with the leaf's shape."""
    paths = leaf_paths(skel)
    missing = sorted(set(paths) - set(values))
    extra = sorted(set(values) - set(paths))
    bad = [f"{k}: expected {tuple(paths[k].shape)}, got {np.shape(v)}"
           for k, v in values.items() if k in paths and tuple(paths[k].shape) != np.shape(v)]
    if missing or extra or bad:
        raise ConversionError(f"encoder arrays: missing {missing}, unexpected {extra}, "
                              f"shape mismatches {bad}")
    leaves, treedef = jax.tree_util.tree_flatten_with_path(skel)
    return jax.tree_util.tree_unflatten(
        treedef, [jnp.asarray(values[path_name(p)], dtype=leaf.dtype) for p, leaf in leaves])


def path_name(path) -> str:
    return ".".join(str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k))))
                    for k in path)


def leaf_paths(tree) -> dict:
    """{dotted path: leaf} of a Module's arrays (e.g. "blocks.wq.w")."""
    return {path_name(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}
