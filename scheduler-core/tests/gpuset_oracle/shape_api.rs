//! The node-shape API around the choice: fragmentation measures, the shared
//! shape catalog, and typed errors for malformed specs.

use crate::shapes::{a100_nv12, bridged_pairs, dgx1, pcie_pix_pairs, twin_dgx1};
use crate::topo::{all, mask};
use gputopo_api::{GpuLink, LinkClass};
use gputopo_scheduler_core::gpuset::{
    NodeShape, ShapeCatalog, full_nvlink_slots, stranded_free_gpus,
};

#[test]
fn fragmentation_measures() {
    let bridged = bridged_pairs().shape();
    assert_eq!(stranded_free_gpus(&bridged, all(4), 2), 0);
    assert_eq!(
        stranded_free_gpus(&bridged, all(4) & !1, 2),
        1,
        "GPU 1 lost its partner"
    );
    assert_eq!(
        stranded_free_gpus(&bridged, all(4), 4),
        0,
        "a SYS quad is the node's best"
    );
    assert_eq!(
        stranded_free_gpus(&bridged, all(4) & !1, 4),
        3,
        "too few left"
    );
    assert_eq!(stranded_free_gpus(&bridged, all(4) & !1, 1), 0);
    assert_eq!(full_nvlink_slots(&bridged, all(4), 2), 2);
    assert_eq!(full_nvlink_slots(&bridged, all(4) & !1, 2), 1);
    assert_eq!(full_nvlink_slots(&bridged, all(4), 4), 0);

    let nv12 = a100_nv12().shape();
    assert_eq!(full_nvlink_slots(&nv12, all(8), 8), 1);
    assert_eq!(full_nvlink_slots(&nv12, all(8), 4), 2);
    assert_eq!(full_nvlink_slots(&nv12, all(8) & !1, 4), 1);
    assert_eq!(stranded_free_gpus(&nv12, all(8) & !1, 4), 0);
    assert_eq!(stranded_free_gpus(&nv12, mask(&[0, 1, 2]), 4), 3);

    let dgx1 = dgx1().shape();
    assert_eq!(
        full_nvlink_slots(&dgx1, all(8), 8),
        0,
        "SYS pairs across sockets"
    );
    assert_eq!(full_nvlink_slots(&dgx1, all(8), 4), 2);
    assert_eq!(full_nvlink_slots(&dgx1, all(8), 2), 4);
    assert_eq!(stranded_free_gpus(&dgx1, all(8), 2), 0);
    // 0's NV2 partners are 3 and 4: with both busy, 0 can only join NV1 pairs.
    assert_eq!(stranded_free_gpus(&dgx1, all(8) & !mask(&[3, 4]), 2), 1);

    let pcie = pcie_pix_pairs().shape();
    assert_eq!(full_nvlink_slots(&pcie, all(8), 2), 0);
    assert_eq!(stranded_free_gpus(&pcie, all(8) & !1, 2), 1);
}

#[test]
fn catalog_shares_shapes_and_tables() {
    let mut catalog = ShapeCatalog::new();
    let a = catalog.shape(&dgx1().spec()).expect("valid");
    let b = catalog.shape(&dgx1().spec()).expect("valid");
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    let mut other = dgx1();
    other.facts[7].mig = true;
    let c = catalog.shape(&other.spec()).expect("valid");
    assert!(!std::sync::Arc::ptr_eq(&a, &c));
    assert_eq!((catalog.len(), catalog.link_matrices()), (2, 1));

    // Shared between scheduler threads.
    fn shareable<T: Send + Sync>(_: &T) {}
    shareable(&*a);
    // The documented table sizes: a few KiB at 8 GPUs, about 0.7 MiB at 16.
    assert!(a.table_bytes() < 8 * 1024, "{}", a.table_bytes());
    let sixteen = twin_dgx1().shape().table_bytes();
    assert!((600 * 1024..800 * 1024).contains(&sixteen), "{sixteen}");
}

#[test]
fn bad_specs_are_typed_errors() {
    use gputopo_scheduler_core::gpuset::ShapeError;
    let mut spec = bridged_pairs().spec();
    spec.links.push(GpuLink {
        a: 1,
        b: 0,
        link_type: gputopo_api::LinkType::Sys,
        nvlinks: 0,
        hops: None,
        weight: None,
        bandwidth: None,
    });
    assert!(matches!(
        NodeShape::from_spec(&spec),
        Err(ShapeError::ConflictingLinks { .. })
    ));
    let mut spec = bridged_pairs().spec();
    spec.gpus[3].index = 40;
    assert!(matches!(
        NodeShape::from_spec(&spec),
        Err(ShapeError::IndexTooLarge { index: 40 })
    ));
    let mut spec = bridged_pairs().spec();
    spec.gpus.clear();
    assert!(matches!(
        NodeShape::from_spec(&spec),
        Err(ShapeError::NoGpus)
    ));
    // A missing pair reads as SYS.
    let mut spec = bridged_pairs().spec();
    spec.links.retain(|l| (l.a, l.b) != (0, 1));
    let shape = NodeShape::from_spec(&spec).expect("valid");
    assert_eq!(shape.link(0, 1), Some(LinkClass::Sys));
}
