//! hetch-proto (placeholder)
