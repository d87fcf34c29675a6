//! hetch-integrity (placeholder)
