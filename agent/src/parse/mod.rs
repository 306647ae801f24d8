//! Parsers of `nvidia-smi` text outputs. Pure: text in, typed values or an error naming line and column out.
