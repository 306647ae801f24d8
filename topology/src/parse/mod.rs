//! Parsers of `nvidia-smi` text outputs. Pure: text in, typed values or an error naming line and column out.

pub mod nvlink_status;
pub mod smi_query;
pub mod topo_matrix;
