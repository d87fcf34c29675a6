//! hetch-engine (placeholder)
