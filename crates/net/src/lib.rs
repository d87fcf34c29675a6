//! hetch-net (placeholder)
