/* ONNX TfIdfVectorizer over integer ids, answering as ORT's CPU kernel does.
 * The pool's n-grams form a trie whose edges (parent node, id) -> child node sit in an
 * open-addressing hash table (built once per model by seamless_tfidf_table); node 0 is the root,
 * column[node] is the output column of the n-gram ending there, or -1, weight[node] its weight (the
 * weights attribute's entry for the n-gram's place in the pool), and has_children[node] says whether
 * a walk may go on from there (a leaf ends it without a lookup). Counting follows ORT: for each skip
 * distance 1 .. max_skip + 1 and each start, the n-grams of items that distance apart are looked up
 * by walking the trie (a miss ends the walk); sizes below min_gram are not counted, and unigrams only
 * at the first distance. Each hit adds 1 (TF), sets the weight (IDF) or adds the weight (TFIDF) in
 * float32, in ORT's order. */
#include <stddef.h>
#include <stdint.h>

static inline size_t tfidf_hash(int64_t parent, int64_t item, size_t mask) {
  uint64_t h = (uint64_t)item * 0x9E3779B97F4A7C15ull ^ (uint64_t)parent * 0xC2B2AE3D27D4EB4Full;
  return (size_t)(h ^ (h >> 29)) & mask;
}

/* Slot h of the table is slots[2h] (the edge's id) and slots[2h + 1] (parent << 32 | child, or -1 when
 * empty): one 16-byte read a probe. */
static inline int64_t tfidf_meta(int64_t parent, int64_t child) {
  return (int64_t)((uint64_t)parent << 32 | (uint32_t)child);
}

/* Fills the table (capacity mask + 1, a power of two above the number of edges; every slots[2h + 1] -1 on
 * entry) with node i's edge (parent[i], item[i]) for i = 1 .. nodes - 1. */
void seamless_tfidf_table(const int32_t* parent, const int64_t* item, size_t nodes, int64_t* slots, size_t mask) {
  for (size_t i = 1; i < nodes; i++) {
    size_t h = tfidf_hash(parent[i], item[i], mask);
    while (slots[2 * h + 1] >= 0) h = (h + 1) & mask;
    slots[2 * h] = item[i];
    slots[2 * h + 1] = tfidf_meta(parent[i], (int64_t)i);
  }
}

/* The child of node parent on id item, or -1. */
static inline int32_t tfidf_child(const int64_t* slots, size_t mask, int32_t parent, int64_t item) {
  for (size_t h = tfidf_hash(parent, item, mask);; h = (h + 1) & mask) {
    int64_t meta = slots[2 * h + 1];
    if (meta < 0) return -1;
    if (slots[2 * h] == item && (int32_t)(meta >> 32) == parent) return (int32_t)(uint32_t)meta;
  }
}

/* out (rows x out_cols, zeroed by the caller) for x (rows x cols). mode: 0 TF, 1 IDF, 2 TFIDF;
 * weight (per node; IDF and TFIDF) or NULL for ones. */
void seamless_tfidf_f32(const int64_t* x, size_t rows, size_t cols, const int64_t* slots, size_t mask,
                        const int64_t* column, const uint8_t* has_children,
                        size_t min_gram, size_t max_gram, size_t max_skip, int mode, const float* weight,
                        float* out, size_t out_cols) {
  for (size_t r = 0; r < rows; r++) {
    const int64_t* row = x + r * cols;
    float* o = out + r * out_cols;
    size_t start_size = min_gram;
    for (size_t skip = 1; skip <= max_skip + 1; skip++) {
      /* a larger distance fits no n-gram of start_size either: stop (max_skip may be huge) */
      if ((start_size - 1) * skip >= cols) break;
      for (size_t s = 0; s + (start_size - 1) * skip < cols; s++) {
        int32_t node = 0;
        for (size_t size = 1, at = s; size <= max_gram && at < cols && has_children[node]; size++, at += skip) {
          node = tfidf_child(slots, mask, node, row[at]);
          if (node < 0) break;
          int64_t c = column[node];
          if (size < start_size || c < 0) continue;
          float w = mode != 0 && weight ? weight[node] : 1.0f;
          if (mode == 1) o[c] = w;
          else o[c] += w;
        }
      }
      if (start_size == 1 && ++start_size > max_gram) break; /* unigrams count at the first distance only */
    }
  }
}
