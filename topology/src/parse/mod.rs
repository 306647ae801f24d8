//! Parsers of the vendors' text outputs. Pure: text in, typed values or an error naming line and column out.

pub mod amd_smi;
mod amd_text_error;
pub mod nvlink_status;
pub mod rocm_smi;
pub mod smi_query;
pub mod topo_matrix;

pub use amd_text_error::AmdTextError;
