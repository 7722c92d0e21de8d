"""Classical machine learning: ai.onnx.ml's Binarizer, ArrayFeatureExtractor, TreeEnsemble, and
ONNX's TfIdfVectorizer (integer n-grams)."""
import numpy as np

from ..registry import FLOATS, NUMERIC, kernel

ML = "ai.onnx.ml"
_INT_IDS = frozenset(map(np.dtype, (np.int32, np.int64)))


@kernel("Binarizer", domain=ML, types=NUMERIC)
def binarizer(X, *, threshold=0.0):
    return ((X > threshold).astype(X.dtype),)


@kernel("ArrayFeatureExtractor", domain=ML, types=NUMERIC)
def array_feature_extractor(X, Y):
    # the elements Y of X's last axis; a vector X gives a one-row matrix, as ORT does
    index = Y.reshape(-1)
    out = X[..., index]
    return (out.reshape((1, index.size) if X.ndim == 1 else X.shape[:-1] + (index.size,)),)


# --- TreeEnsemble -------------------------------------------------------------------------

_COMPARE = {0: np.less_equal, 1: np.less, 2: np.greater_equal, 3: np.greater, 4: np.equal, 5: np.not_equal}


def _check_tree_ensemble(node, graph):
    if node.attrs.get("post_transform", 0):
        return f"post_transform={node.attrs['post_transform']} not supported (0, none, only)"
    if node.attrs.get("aggregate_function", 1) not in (0, 1, 2, 3):
        return f"aggregate_function={node.attrs['aggregate_function']} is not defined"
    return None


@kernel("TreeEnsemble", domain=ML, since=5, types=FLOATS, check=_check_tree_ensemble)
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

def _check_tfidf(node, graph):
    if node.attrs.get("pool_strings") is not None:
        return "TfIdfVectorizer over strings is not supported (integer pools only)"
    if node.attrs.get("mode") not in ("TF", "IDF", "TFIDF"):
        return f"mode={node.attrs.get('mode')!r} is not defined"
    return None


@kernel("TfIdfVectorizer", since=9, types=_INT_IDS, check=_check_tfidf)
def tfidf_vectorizer(X, *, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts, ngram_indexes,
                     pool_int64s=None, pool_strings=None, weights=None):
    # The pool lists the n-grams by size (ngram_counts[k]: where the (k+1)-grams start); each gets
    # the output column ngram_indexes[i]. Sizes outside [min, max] still take their columns.
    pool, grams, i = list(pool_int64s), {}, 0
    bounds = list(ngram_counts) + [len(pool)]
    for n, (begin, end) in enumerate(zip(bounds, bounds[1:]), start=1):
        for at in range(begin, end, n):
            if min_gram_length <= n <= max_gram_length:
                grams[tuple(pool[at:at + n])] = ngram_indexes[i]
            i += 1
    rows = X.reshape(1, -1) if X.ndim < 2 else X
    counts = np.zeros((rows.shape[0], max(ngram_indexes) + 1), np.float32)
    for r, row in enumerate(rows.tolist()):
        # n-grams of items `skip` apart, for skip = 1 .. max_skip_count + 1; unigrams counted once
        for skip in range(1, max_skip_count + 2):
            smallest = min_gram_length if skip == 1 else max(min_gram_length, 2)
            for begin in range(len(row)):
                for n in range(smallest, max_gram_length + 1):
                    last = begin + (n - 1) * skip
                    if last >= len(row):
                        break
                    column = grams.get(tuple(row[begin:last + 1:skip]))
                    if column is not None:
                        counts[r, column] += 1
    w = np.ones(counts.shape[1], np.float32) if not weights else np.asarray(weights, np.float32)
    if mode == "TF":
        out = counts
    elif mode == "IDF":
        out = (counts > 0) * w
    else:  # TFIDF
        out = counts * w
    return (out.astype(np.float32).reshape(-1) if X.ndim < 2 else out.astype(np.float32),)
