"""Parity of TfIdfVectorizer (kernels/cpu/ml.py, native/cpu/ml.c) with stock ORT: n-gram sizes, skips, the
three weightings, the pool's layout. Invalid inputs are tests/hostile/cases.py's (tfidf_*)."""
import numpy as np
import pytest

from parity import check_node

rng = np.random.default_rng(17)
F32, I64 = np.float32, np.int64


# --- TfIdfVectorizer ----------------------------------------------------------------------------------------

# 1-grams 0..9, 2-grams and 3-grams of those ids (some of them twice in a row, some with other ids)
POOL_COUNTS = [0, 10, 24]
POOL = list(range(10)) + [1, 2, 2, 3, 3, 3, 4, 1, 5, 6, 7, 8, 9, 9] + [1, 2, 3, 3, 3, 3, 2, 1, 2, 7, 8, 9]
GRAMS = 10 + 7 + 4


def tfidf(x, mode="TF", lo=1, hi=3, skip=0, weights=True, indexes=None, pool=POOL, counts=POOL_COUNTS):
    attrs = {"mode": mode, "min_gram_length": lo, "max_gram_length": hi, "max_skip_count": skip,
             "ngram_counts": counts, "pool_int64s": pool,
             "ngram_indexes": list(range(GRAMS)) if indexes is None else indexes}
    if weights:
        attrs["weights"] = rng.uniform(0.1, 3.0, len(attrs["ngram_indexes"])).round(3).tolist()
    (y,) = check_node("TfIdfVectorizer", [x], attrs, opset=9, outputs=[F32], rtol=1e-6, atol=0)
    return y


def text(*shape, dtype=I64):
    """Ids mostly of the pool's (runs of 1 2 3 and 3 3 3 are common), some not (10..12, negative)."""
    return rng.choice([1, 2, 3, 3, 3, 4, 7, 8, 9, 0, 10, 11, -12], shape).astype(dtype)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weights", [False, True])
def test_tfidf_weightings(mode, weights):
    y = tfidf(text(200), mode, weights=weights)
    assert (y > 0).sum() > 10


@pytest.mark.parametrize("lo,hi", [(1, 1), (2, 2), (2, 3), (1, 3), (3, 3)])
@pytest.mark.parametrize("skip", [0, 1, 3])
def test_tfidf_gram_sizes_and_skips(lo, hi, skip):
    tfidf(text(3, 40, dtype=np.int32), "TFIDF", lo, hi, skip)


def test_tfidf_columns_by_ngram_indexes():
    # n-grams to columns by a permutation (a column's weight is weights[column], not the n-gram's), then with
    # gaps; the sizes outside min..max keep their columns
    tfidf(text(2, 50), "TFIDF", 2, 3, 1, indexes=[int(i) for i in rng.permutation(GRAMS)])
    tfidf(text(2, 50), "TF", 1, 2, 1, weights=False, indexes=[int(i) * 2 + 1 for i in rng.permutation(GRAMS)])


def test_tfidf_skips_longer_than_the_row():
    tfidf(text(5), "TF", 1, 3, skip=1000)


def test_tfidf_large_ids_and_unknown_ids():
    big = 2 ** 40
    pool = [big, -5, 7, big, 7, 7, -5, -5, big]
    x = np.array([[big, 7, -5, big, 7, 3, big, -5], [7, 7, big, big, 0, -5, big, 7]], I64)
    tfidf(x, "TF", 1, 2, 1, weights=False, indexes=[0, 1, 2, 3, 4, 5], pool=pool, counts=[0, 3])


def test_tfidf_empty_rows():
    assert tfidf(np.zeros((3, 0), I64), "TFIDF").shape == (3, GRAMS)
    assert tfidf(np.zeros(0, I64), "TF").shape == (GRAMS,)
