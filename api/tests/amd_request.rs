//! A pod's GPU vendor comes from the resource its limit is on.

use gputopo_api::k8s_openapi::api::core::v1::Pod;
use gputopo_api::{GpuRequest, GpuVendor};

fn pod(limits: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "resources": {"limits": limits}}]}
    }))
    .expect("pod")
}

#[test]
fn amd_gpu_limits_are_amd_requests_and_both_vendors_is_an_error() {
    let r = GpuRequest::from_pod(&pod(serde_json::json!({"amd.com/gpu": "4"}))).unwrap();
    assert_eq!((r.gpus, r.vendor), (4, GpuVendor::Amd));
    let r = GpuRequest::from_pod(&pod(serde_json::json!({"nvidia.com/gpu": "2"}))).unwrap();
    assert_eq!((r.gpus, r.vendor), (2, GpuVendor::Nvidia));
    let e = GpuRequest::from_pod(&pod(
        serde_json::json!({"nvidia.com/gpu": "1", "amd.com/gpu": "1"}),
    ))
    .unwrap_err();
    assert!(e.to_string().contains("one vendor"), "{e}");
}
