//! In-tree volume sources that CSI migration hands to a CSI driver
//! (`awsElasticBlockStore`, `gcePersistentDisk`, `azureDisk`, `azureFile`,
//! `cinder`, `vsphereVolume`, `portworxVolume`), inline in a pod or behind
//! a PersistentVolume. kube-scheduler's NodeVolumeLimits counts such a
//! volume under its CSI driver's attach limit on a node whose CSINode
//! lists the in-tree plugin as migrated
//! (`storage.alpha.kubernetes.io/migrated-plugins`); the names are
//! upstream's (`k8s.io/csi-translation-lib`). A handle only has to tell
//! one disk from another on a node, so it is the source's own id.

use gputopo_api::k8s_openapi::api::core::v1 as k8s;

/// The CSINode annotation listing the in-tree plugins migrated on a node.
pub const MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";

/// `(in-tree plugin, CSI driver)` pairs CSI migration knows.
pub const MIGRATIONS: [(&str, &str); 7] = [
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// One in-tree volume CSI migration moves to a driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigratedVolume {
    /// The in-tree plugin (`kubernetes.io/aws-ebs`).
    pub plugin: &'static str,
    /// The CSI driver it moves to (`ebs.csi.aws.com`).
    pub driver: &'static str,
    /// The disk's id in its source.
    pub handle: String,
}

impl MigratedVolume {
    /// The first source present, by its handle, in [`MIGRATIONS`] order.
    fn first(handles: [Option<String>; 7]) -> Option<MigratedVolume> {
        let (index, handle) = handles
            .into_iter()
            .enumerate()
            .find_map(|(i, h)| Some((i, h?)))?;
        let (plugin, driver) = MIGRATIONS[index];
        Some(MigratedVolume {
            plugin,
            driver,
            handle,
        })
    }

    /// The pod volume's migrated source, if it has one.
    pub fn inline(v: &k8s::Volume) -> Option<MigratedVolume> {
        MigratedVolume::first([
            v.aws_elastic_block_store
                .as_ref()
                .map(|s| ebs_id(&s.volume_id)),
            v.gce_persistent_disk.as_ref().map(|s| s.pd_name.clone()),
            v.azure_disk.as_ref().map(|s| s.disk_uri.clone()),
            v.azure_file
                .as_ref()
                .map(|s| format!("{}#{}", s.secret_name, s.share_name)),
            v.cinder.as_ref().map(|s| s.volume_id.clone()),
            v.vsphere_volume.as_ref().map(|s| s.volume_path.clone()),
            v.portworx_volume.as_ref().map(|s| s.volume_id.clone()),
        ])
    }

    /// The PersistentVolume's migrated source, if it has one.
    pub fn persistent(s: &k8s::PersistentVolumeSpec) -> Option<MigratedVolume> {
        MigratedVolume::first([
            s.aws_elastic_block_store
                .as_ref()
                .map(|s| ebs_id(&s.volume_id)),
            s.gce_persistent_disk.as_ref().map(|s| s.pd_name.clone()),
            s.azure_disk.as_ref().map(|s| s.disk_uri.clone()),
            s.azure_file
                .as_ref()
                .map(|s| format!("{}#{}", s.secret_name, s.share_name)),
            s.cinder.as_ref().map(|s| s.volume_id.clone()),
            s.vsphere_volume.as_ref().map(|s| s.volume_path.clone()),
            s.portworx_volume.as_ref().map(|s| s.volume_id.clone()),
        ])
    }

    /// The CSI driver an in-tree provisioner (a StorageClass's) migrates to.
    pub fn driver_of(plugin: &str) -> Option<&'static str> {
        MIGRATIONS
            .iter()
            .find(|(p, _)| *p == plugin)
            .map(|(_, d)| *d)
    }
}

/// `aws://us-east-1a/vol-0abc` and `vol-0abc` name one volume.
fn ebs_id(id: &str) -> String {
    id.rsplit('/').next().unwrap_or(id).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inline_and_persistent_sources_name_their_driver_and_disk() {
        let v: k8s::Volume = serde_json::from_value(json!({"name": "d",
            "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}}))
        .expect("a volume");
        let m = MigratedVolume::inline(&v).expect("migrated");
        assert_eq!(
            (m.plugin, m.driver, m.handle.as_str()),
            ("kubernetes.io/aws-ebs", "ebs.csi.aws.com", "vol-1")
        );
        let pv: k8s::PersistentVolumeSpec = serde_json::from_value(json!({
            "gcePersistentDisk": {"pdName": "disk-1"}}))
        .expect("a spec");
        let m = MigratedVolume::persistent(&pv).expect("migrated");
        assert_eq!(
            (m.driver, m.handle.as_str()),
            ("pd.csi.storage.gke.io", "disk-1")
        );
        let empty: k8s::Volume =
            serde_json::from_value(json!({"name": "e", "emptyDir": {}})).expect("a volume");
        assert_eq!(MigratedVolume::inline(&empty), None);
        assert_eq!(
            MigratedVolume::driver_of("kubernetes.io/cinder"),
            Some("cinder.csi.openstack.org")
        );
        assert_eq!(MigratedVolume::driver_of("ebs.csi.aws.com"), None);
    }
}
