"""Classical machine learning: ai.onnx.ml's Binarizer, ArrayFeatureExtractor, TreeEnsemble, and
ONNX's TfIdfVectorizer (integer n-grams)."""
import threading

import numpy as np

from .. import checks
from ..checks import InvalidArgument
from ..registry import FLOATS, NUMERIC, kernel

ML = "ai.onnx.ml"
INT_IDS = frozenset(map(np.dtype, (np.int32, np.int64)))


@kernel("Binarizer", domain=ML, types=NUMERIC)
def binarizer(X, *, threshold=0.0):
    return ((X > threshold).astype(X.dtype),)


@kernel("ArrayFeatureExtractor", domain=ML, types=NUMERIC)
def array_feature_extractor(X, Y):
    # the elements Y of X's last axis; a vector X gives a one-row matrix, as ORT does
    index = Y.reshape(-1)
    bad = checks.first_outside(index, 0, X.shape[-1])
    if bad:
        raise InvalidArgument(f"Invalid Y argument: index is out of range: Y[{bad[0]}] ({bad[1]}) must be in "
                              f"[0, {X.shape[-1]})")
    out = X[..., index]
    return (out.reshape((1, index.size) if X.ndim == 1 else X.shape[:-1] + (index.size,)),)


# --- TreeEnsemble -------------------------------------------------------------------------

_COMPARE = {0: np.less_equal, 1: np.less, 2: np.greater_equal, 3: np.greater, 4: np.equal, 5: np.not_equal}


def check_tree_ensemble(node, graph):
    if node.attrs.get("post_transform", 0):
        return f"post_transform={node.attrs['post_transform']} not supported (0, none, only)"
    if node.attrs.get("aggregate_function", 1) not in (0, 1, 2, 3):
        return f"aggregate_function={node.attrs['aggregate_function']} is not defined"
    return None


@kernel("TreeEnsemble", domain=ML, since=5, types=FLOATS, check=check_tree_ensemble)
def tree_ensemble(X, *, aggregate_function=1, leaf_targetids, leaf_weights, membership_values=None, n_targets,
                  nodes_falseleafs, nodes_falsenodeids, nodes_featureids, nodes_hitrates=None,
                  nodes_missing_value_tracks_true=None, nodes_modes, nodes_splits, nodes_trueleafs, nodes_truenodeids,
                  post_transform=0, tree_roots):
    modes, splits = np.asarray(nodes_modes).reshape(-1), np.asarray(nodes_splits).reshape(-1)
    weights = np.asarray(leaf_weights).reshape(-1)
    missing_true = nodes_missing_value_tracks_true or [0] * len(modes)
    # the members of each MEMBER node: consecutive runs of membership_values, separated by NaN
    members, runs = {}, iter(np.asarray(membership_values if membership_values is not None else []).reshape(-1))
    for i in np.flatnonzero(modes == 6):
        members[i] = set()
        for v in runs:
            if np.isnan(v):
                break
            members[i].add(float(v))

    def leaf_of(x, index):
        is_leaf = bool(nodes_trueleafs[index] and nodes_falseleafs[index]
                       and nodes_truenodeids[index] == nodes_falsenodeids[index])  # a tree that is one leaf
        while not is_leaf:
            v = x[nodes_featureids[index]]
            if np.isnan(v):
                branch = bool(missing_true[index])
            elif modes[index] == 6:
                branch = float(v) in members[index]
            else:
                branch = bool(_COMPARE[int(modes[index])](v, splits[index]))
            index, is_leaf = ((nodes_truenodeids[index], nodes_trueleafs[index]) if branch
                              else (nodes_falsenodeids[index], nodes_falseleafs[index]))
        return index

    reduce = {0: np.add, 1: np.add, 2: np.minimum, 3: np.maximum}[aggregate_function]
    start = {2: np.inf, 3: -np.inf}.get(aggregate_function, 0.0)
    out = np.full((X.shape[0], n_targets), start)
    for row, x in enumerate(X):
        for root in tree_roots:
            leaf = leaf_of(x, root)
            target = leaf_targetids[leaf]
            out[row, target] = reduce(out[row, target], weights[leaf])
    if aggregate_function == 0:
        out /= len(tree_roots)
    return (out.astype(X.dtype),)


# --- TfIdfVectorizer ----------------------------------------------------------------------

def check_tfidf(node, graph):
    if node.attrs.get("pool_strings") is not None:
        return "TfIdfVectorizer over strings is not supported (integer pools only)"
    if node.attrs.get("mode") not in ("TF", "IDF", "TFIDF"):
        return f"mode={node.attrs.get('mode')!r} is not defined"
    return None


def _check_tfidf_attributes(lo, hi, skip, counts, indexes, pool, weights):
    """What stock ORT's kernel enforces when it loads the model (ORT_FAIL there), in its order (and
    _tfidf_trie refuses the n-grams past ngram_indexes, which stock would read out of bounds)."""
    if lo <= 0:
        raise ValueError(f"Required min_gram_length must be positive: {lo}")
    if hi < lo:
        raise ValueError(f"min_gram_length >= max_gram_length required: {hi} >= {lo}")
    if skip < 0:
        raise ValueError(f"max_skip_count must be non-negative: {skip}")
    if not counts:
        raise ValueError("Non-empty ngram_counts is required")
    for name, value in (("min_gram_length", lo), ("max_gram_length", hi)):
        if value > len(counts):
            raise ValueError(f"{name} must be inbounds of ngram_counts: {value} <= {len(counts)}")
    if not indexes:
        raise ValueError("Non-empty ngram_indexes is required")
    if min(indexes) < 0:
        raise ValueError("Negative ngram_indexes values are not allowed")
    if weights is not None and len(weights) != len(indexes):
        raise ValueError(f"Got weights of size: {len(weights)} but ngram_indexes size: {len(indexes)} "
                         "must be of equal size")
    if not pool:
        raise ValueError("non-empty pool_int64s is required if pool_strings not provided")
    for n, (begin, end) in enumerate(zip(counts, list(counts[1:]) + [len(pool)]), start=1):
        if not 0 <= begin <= end <= len(pool):
            raise ValueError(f"n-gram counts out of bounds for {n}-grams")
        if (end - begin) % n:
            raise ValueError(f"Number of items must compose whole {n}-grams")


_TRIES: dict = {}  # id(pool_int64s) -> (the attributes it was built from, its trie)
_TRIES_LOCK = threading.Lock()  # sessions run concurrently


def _tfidf_trie(min_gram_length, max_gram_length, max_skip_count, ngram_counts, ngram_indexes, pool_int64s,
                weights=None):
    """The native trie of the pool's n-grams of sizes min..max, checked and built once per node (the
    attribute lists a kernel is bound to are the same objects at every run)."""
    key = (min_gram_length, max_gram_length, max_skip_count, ngram_counts, ngram_indexes, pool_int64s, weights)
    cached = _TRIES.get(id(pool_int64s))
    if cached is not None and all(x is y for x, y in zip(cached[0], key)):
        return cached[1]
    _check_tfidf_attributes(*key)
    from .native import TfIdfTrie
    lo, hi, counts, indexes, pool = min_gram_length, max_gram_length, ngram_counts, ngram_indexes, pool_int64s
    edges, parent, item, column, weight = {}, [0], [0], [-1], [0.0]
    gram = 0  # ngram_indexes position of the pool's next n-gram (sizes outside lo..hi included)
    for n, (begin, end) in enumerate(zip(counts, list(counts[1:]) + [len(pool)]), start=1):
        if not lo <= n <= hi:
            gram += (end - begin) // n
            continue
        for at in range(begin, end, n):
            node = 0
            for v in pool[at:at + n]:
                child = edges.setdefault((node, v), len(parent))
                if child == len(parent):
                    parent.append(node)
                    item.append(v)
                    column.append(-1)
                    weight.append(0.0)
                node = child
            if column[node] >= 0:
                raise ValueError(f"Duplicate ngram detected, size: {n} id: {gram + 1}")
            if gram >= len(indexes):
                raise ValueError(f"the pool's {n}-gram number {gram + 1} has no entry in ngram_indexes "
                                 f"({len(indexes)} entries)")
            column[node] = indexes[gram]
            weight[node] = weights[gram] if weights is not None else 1.0  # by the n-gram, as stock weighs
            gram += 1
    trie = TfIdfTrie(parent, item, column, max(indexes) + 1, None if weights is None else weight)
    with _TRIES_LOCK:
        if len(_TRIES) >= 64:  # sessions come and go: keep the recent ones
            _TRIES.pop(next(iter(_TRIES)))
        _TRIES[id(pool_int64s)] = (key, trie)
    return trie


def validate_tfidf(node, graph):
    a = node.attrs
    _tfidf_trie(*[a.get(k) for k in ("min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts",
                                     "ngram_indexes", "pool_int64s", "weights")])


@kernel("TfIdfVectorizer", since=9, types=INT_IDS, check=check_tfidf, validate=validate_tfidf)
def tfidf_vectorizer(X, *, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts, ngram_indexes,
                     pool_int64s=None, pool_strings=None, weights=None):
    if X.ndim > 2 or (X.ndim == 2 and X.shape[0] < 1):
        raise InvalidArgument("Input shape must have either [C] or [B,C] dimensions with B > 0.")
    from .native import tfidf
    trie = _tfidf_trie(min_gram_length, max_gram_length, max_skip_count, ngram_counts, ngram_indexes, pool_int64s,
                       weights)
    out = tfidf(X.reshape(1, -1) if X.ndim < 2 else X, trie, min_gram_length, max_gram_length, max_skip_count,
                {"TF": 0, "IDF": 1, "TFIDF": 2}[mode])
    return (out.reshape(-1) if X.ndim < 2 else out,)
