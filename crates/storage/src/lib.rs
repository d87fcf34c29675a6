//! hetch-storage (placeholder)
