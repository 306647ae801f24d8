//! Who the scheduler writes as, and how a refused write is sorted: shared
//! by every write over `kube::Client` (`kube_writes.rs`, the claims'
//! `claims/claim_writes.rs`, the extender), so none of them needs another.

use crate::cycle::{WriteError, WriteErrorKind, WriteOp};

/// The field manager of every write, and the events' reporting controller.
pub const FIELD_MANAGER: &str = "gputopo-scheduler";

/// Sorts a kube error into what the cycle reacts to.
pub(crate) fn write_error(op: WriteOp, target: String, e: kube::Error) -> WriteError {
    let kind = match &e {
        kube::Error::Api(s) => match s.code {
            404 => WriteErrorKind::NotFound,
            409 => WriteErrorKind::Conflict,
            429 => WriteErrorKind::TooManyRequests,
            408 | 504 => WriteErrorKind::Timeout,
            c if c >= 500 => WriteErrorKind::Unavailable,
            _ => WriteErrorKind::Rejected,
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => WriteErrorKind::Unavailable,
        _ => WriteErrorKind::Rejected,
    };
    let message = match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    };
    WriteError {
        op,
        kind,
        target,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            ..Status::failure(&format!("code {code}"), "")
        }))
    }

    #[test]
    fn api_codes_become_kinds() {
        for (code, kind) in [
            (404, WriteErrorKind::NotFound),
            (409, WriteErrorKind::Conflict),
            (429, WriteErrorKind::TooManyRequests),
            (504, WriteErrorKind::Timeout),
            (503, WriteErrorKind::Unavailable),
            (403, WriteErrorKind::Rejected),
        ] {
            let e = write_error(WriteOp::Bind, "a/b".into(), api(code));
            assert_eq!(e.kind, kind, "{code}");
            assert_eq!(e.message, format!("code {code}"));
        }
    }
}
