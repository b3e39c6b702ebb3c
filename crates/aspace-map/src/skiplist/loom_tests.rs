//! Loom models of the skiplist protocols (filled in below).
