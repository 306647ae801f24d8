//! The `nvidia-smi nvlink -s` and `nvidia-smi -q` (text and XML) parsers over the recorded
//! fixtures in `fixtures/nvidia/`, and the facts the nvidia-smi backend builds from `topo -m`
//! with either or both of them. The `topo -m` parser is in `topo_matrix_fixtures.rs`.

use gputopo_topology::backend::nvidia_smi::{NvidiaSmiError, facts_from_texts};
use gputopo_topology::parse::nvlink_status::{self, LinkState};
use gputopo_topology::parse::smi_query;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nvidia")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn nvlink_status_fixtures() {
    let s = nvlink_status::parse(&read("v100-sxm2-32gb-8gpu-vast-driver580-nvlink-s.txt")).unwrap();
    assert_eq!(s.gpus.len(), 8);
    assert!(!s.snipped);
    let g7 = s.gpu(7).unwrap();
    assert_eq!(g7.product.as_deref(), Some("Tesla V100-SXM2-32GB"));
    assert_eq!(
        g7.uuid.as_deref(),
        Some("GPU-b0d45f0b-6922-8af3-6b29-8826de10b235")
    );
    assert_eq!(g7.links.len(), 6);
    assert_eq!(g7.links[5].link, 5);
    assert_eq!(g7.links[5].state, LinkState::Active { speed_gbps: 25.781 });

    let s =
        nvlink_status::parse(&read("h100-80gb-hbm3-gpu0-nvlink-status-i0-18-links.txt")).unwrap();
    assert_eq!(s.gpus.len(), 1);
    assert_eq!(s.gpus[0].links.len(), 18);
    assert_eq!(
        s.gpus[0].links[17].state,
        LinkState::Active { speed_gbps: 26.562 }
    );

    let s = nvlink_status::parse(&read(
        "hgx-a100-4gpu-sxm4-80gb-driver580-nvlink-s-12-links.txt",
    ))
    .unwrap();
    assert!(s.gpus.iter().all(|g| g.links.len() == 12));
    assert_eq!(
        s.gpus[3].links[0].state,
        LinkState::Active { speed_gbps: 25.0 }
    );

    let s = nvlink_status::parse(&read(
        "rtx-a6000-3gpu-one-nvlink-pair-links-inactive-nvlink-s.txt",
    ))
    .unwrap();
    assert_eq!(s.gpus.len(), 3);
    assert!(s.gpus[2].all_inactive && s.gpus[2].links.is_empty());
    assert!(!s.gpus[0].all_inactive && s.gpus[0].links.len() == 4);

    let s = nvlink_status::parse(&read(
        "rtx3090-2gpu-nvlink-bridge-5900x-redacted-uuid-nvlink-s.txt",
    ))
    .unwrap();
    assert_eq!(s.gpus[0].uuid.as_deref(), Some("GPU-略-332e-08e4-72fe-略"));
    assert_eq!(
        s.gpus[1].links[3].state,
        LinkState::Active { speed_gbps: 14.062 }
    );

    let s = nvlink_status::parse(&read(
        "rtx3090-2gpu-nvlink-club3090-driver610-space-expanded-nvlink-s.txt",
    ))
    .unwrap();
    assert_eq!(s.gpus.len(), 2);
    assert!(s.gpus.iter().all(|g| g.links.len() == 4));

    let s = nvlink_status::parse(&read(
        "testfixture-h200-2gpu-nvlink-status-DEGRADED-links-hand-edited.txt",
    ))
    .unwrap();
    assert_eq!(
        s.gpus[0].links[2].state,
        LinkState::Active { speed_gbps: 1.0 }
    );
    assert_eq!(
        s.gpus[0].links[10].state,
        LinkState::Active { speed_gbps: 1.562 }
    );

    let s = nvlink_status::parse(&read("dgx1-v100-microway-nvlink-status-SNIPPED.txt")).unwrap();
    assert!(s.snipped);
    let indices: Vec<u32> = s.gpus.iter().map(|g| g.index).collect();
    assert_eq!(indices, [0, 7]);
    assert_eq!(s.gpus[0].uuid, None);
    assert_eq!(s.gpus[0].product.as_deref(), Some("Tesla V100-SXM2-32GB"));
    assert!(s.gpus[0].maybe_incomplete && !s.gpus[1].maybe_incomplete);

    let s = nvlink_status::parse(&read(
        "gb200-4gpu-tray-k8s-test-infra-issue371-nvlink-s-53.125GBps-SNIPPED-BY-AUTHOR.txt",
    ))
    .unwrap();
    assert!(s.snipped);
    assert_eq!(s.gpus[0].links.len(), 18);
    assert_eq!(s.gpus[1].links.len(), 2);
    assert!(s.gpus[1].maybe_incomplete && !s.gpus[0].maybe_incomplete);
    assert_eq!(
        s.gpus[0].links[0].state,
        LinkState::Active { speed_gbps: 53.125 }
    );

    // Other nvlink subcommands are not `-s`.
    let e =
        nvlink_status::parse(&read("h100-80gb-hbm3-gpu0-nvlink-capabilities-i0.txt")).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn smi_query_text_fixtures() {
    let q = smi_query::parse(&read("v100-pcie-32gb-driver410-nvidia-smi-q.txt")).unwrap();
    assert_eq!(q.driver_version.as_deref(), Some("410.48"));
    assert_eq!(q.cuda_version, None);
    assert_eq!(q.attached_gpus, Some(4));
    assert_eq!(q.gpus.len(), 1);
    let g = &q.gpus[0];
    assert_eq!(g.product.as_deref(), Some("Tesla V100-PCIE-32GB"));
    assert_eq!(
        g.uuid.as_deref(),
        Some("GPU-4965xxxx-79e3-7941-12cb-1dfe9c53xxxx")
    );
    assert_eq!(g.memory_mib, Some(32480));
    assert_eq!(g.pci_bus_id.as_deref(), Some("00000000:18:00.0"));
    assert_eq!(g.mig_enabled, None);
    assert_eq!(g.numa_node, None);
    assert_eq!(g.fabric, None);

    let q = smi_query::parse(&read(
        "h100-80gb-hbm3-single-gpu-della-driver545-nvidia-smi-a.txt",
    ))
    .unwrap();
    assert_eq!(q.driver_version.as_deref(), Some("545.23.08"));
    assert_eq!(q.cuda_version.as_deref(), Some("12.3"));
    let g = &q.gpus[0];
    assert_eq!(g.product.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(
        g.uuid.as_deref(),
        Some("GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1")
    );
    assert_eq!(g.memory_mib, Some(81559));
    assert_eq!(g.pci_bus_id.as_deref(), Some("00000000:19:00.0"));
    assert_eq!(g.mig_enabled, Some(false));
    // `Fabric` has State/Status only on this driver: no clique, no cluster.
    assert_eq!(g.fabric, None);

    let q = smi_query::parse(&read(
        "tesla-m2090-driver270-OLD-nvidia-smi-q-bus-id-0-2-0.txt",
    ))
    .unwrap();
    assert_eq!(q.driver_version.as_deref(), Some("270.41.19"));
    assert_eq!(q.attached_gpus, Some(2));
    let g = &q.gpus[0];
    assert_eq!(g.product.as_deref(), Some("Tesla M2090"));
    assert_eq!(g.memory_mib, Some(5375));
    // `0:2:0` is domain:bus:device, as its `Bus : 2` / `Device : 0` lines say.
    assert_eq!(g.pci_bus_id.as_deref(), Some("00000000:02:00.0"));

    let q = smi_query::parse(&read("a100-della-gpu-nvidia-smi-a-pci-section-snippet.txt")).unwrap();
    assert_eq!(q.gpus.len(), 1);
    assert_eq!(q.gpus[0].pci_bus_id.as_deref(), Some("00000000:17:00.0"));
    assert_eq!(q.gpus[0].product, None);

    // The default table is not `-q`.
    assert!(
        smi_query::parse(&read(
            "rtx3090-2gpu-club3090-driver610-nvidia-smi-KMD-version-header.txt"
        ))
        .is_err()
    );
}

const XML: &str = r#"<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<timestamp>Mon Oct 13 00:25:36 2025</timestamp>
	<driver_version>570.124.06</driver_version>
	<cuda_version>12.8</cuda_version>
	<attached_gpus>2</attached_gpus>
	<gpu id="00000000:17:00.0">
		<product_name>NVIDIA GB200</product_name>
		<mig_mode>
			<current_mig>Enabled</current_mig>
			<pending_mig>Enabled</pending_mig>
		</mig_mode>
		<mig_devices>
			None
		</mig_devices>
		<uuid>GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde</uuid>
		<pci>
			<pci_bus>17</pci_bus>
			<pci_bus_id>00000000:17:00.0</pci_bus_id>
		</pci>
		<numa_node>0</numa_node>
		<fb_memory_usage>
			<total>189471 MiB</total>
			<used>1 MiB</used>
		</fb_memory_usage>
		<fabric>
			<state>Completed</state>
			<status>Success</status>
			<cliqueId>32766</cliqueId>
			<clusterUuid>4a5e1c8b-0f3e-4f4e-9d3b-2a1b3c4d5e6f</clusterUuid>
			<health><bandwidth>Full</bandwidth></health>
		</fabric>
	</gpu>
	<gpu id="00000000:AB:00.0">
		<product_name>NVIDIA GB200</product_name>
		<mig_mode><current_mig>N/A</current_mig></mig_mode>
		<uuid>GPU-39ac7bce-e3d6-b426-008e-fa47897c72d5</uuid>
		<pci><pci_bus_id>00000000:AB:00.0</pci_bus_id></pci>
		<fb_memory_usage><total>189471 MiB</total></fb_memory_usage>
		<fabric><state>N/A</state><cliqueId>N/A</cliqueId><clusterUuid>N/A</clusterUuid></fabric>
	</gpu>
</nvidia_smi_log>
"#;

#[test]
fn smi_query_xml() {
    let q = smi_query::parse(XML).unwrap();
    assert_eq!(q.driver_version.as_deref(), Some("570.124.06"));
    assert_eq!(q.cuda_version.as_deref(), Some("12.8"));
    assert_eq!(q.attached_gpus, Some(2));
    assert_eq!(q.gpus.len(), 2);
    let g = &q.gpus[0];
    assert_eq!(g.product.as_deref(), Some("NVIDIA GB200"));
    assert_eq!(g.memory_mib, Some(189471));
    assert_eq!(g.mig_enabled, Some(true));
    assert_eq!(g.numa_node, Some(0));
    let f = g.fabric.as_ref().unwrap();
    assert_eq!(f.clique_id, Some(32766));
    assert_eq!(
        f.cluster_uuid.as_deref(),
        Some("4a5e1c8b-0f3e-4f4e-9d3b-2a1b3c4d5e6f")
    );
    let g = &q.gpus[1];
    assert_eq!(g.pci_bus_id.as_deref(), Some("00000000:ab:00.0"));
    assert_eq!(g.mig_enabled, None);
    assert_eq!(g.fabric, None);
    assert_eq!(g.numa_node, None);

    assert!(smi_query::parse("<nvidia_smi_log><gpu><fb_memory_usage><total>lots</total></fb_memory_usage></gpu></nvidia_smi_log>").is_err());
    assert!(smi_query::parse("<nvidia_smi_log><gpu>").is_err());
    assert!(smi_query::parse("<html><body>not it</body></html>").is_err());
}

#[test]
fn facts_from_all_three_texts() {
    let topo = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n\
                GPU0\t X \tNV18\t0-71\t0\nGPU1\tNV18\t X \t72-143\t1\n";
    let nvlink =
        read("gb200-4gpu-tray-k8s-test-infra-issue371-nvlink-s-53.125GBps-SNIPPED-BY-AUTHOR.txt");
    let facts = facts_from_texts(topo, Some(&nvlink), Some(XML)).unwrap();
    assert_eq!(facts.driver_version.as_deref(), Some("570.124.06"));
    assert_eq!(facts.cuda_version.as_deref(), Some("12.8"));
    let g0 = &facts.gpus[0];
    assert_eq!(
        g0.uuid.as_deref(),
        Some("GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde")
    );
    assert_eq!(g0.memory_mib, Some(189471));
    assert_eq!(g0.pci_bus_id.as_deref(), Some("00000000:17:00.0"));
    assert_eq!(g0.mig_enabled, Some(true));
    assert_eq!(g0.numa_node, Some(0));
    assert_eq!(g0.cpu_affinity.as_deref(), Some("0-71"));
    assert_eq!(g0.fabric.as_ref().unwrap().clique_id, Some(32766));
    let links = g0.nvlinks.as_ref().unwrap();
    assert_eq!(links.len(), 18);
    assert!(
        links
            .iter()
            .all(|l| l.active && l.speed_gbps == Some(53.125))
    );
    // GPU1's list was cut by `...`: unknown, not two links.
    assert_eq!(facts.gpus[1].nvlinks, None);
    assert_eq!(facts.gpus[1].numa_node, Some(1));

    // The UUIDs disagree: an error naming both.
    let other = nvlink.replace("GPU-d1b93026", "GPU-00000000");
    let e = facts_from_texts(topo, Some(&other), Some(XML)).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("GPU-00000000-6d5b") && text.contains("GPU-d1b93026-6d5b"),
        "{text}"
    );
    assert!(matches!(
        e,
        NvidiaSmiError::Disagree {
            index: 0,
            field: "UUID",
            ..
        }
    ));

    // -q of another node.
    let e = facts_from_texts(
        topo,
        None,
        Some(&read("v100-pcie-32gb-driver410-nvidia-smi-q.txt")),
    )
    .unwrap_err();
    assert!(
        matches!(e, NvidiaSmiError::GpuCount { topo: 2, query: 1 }),
        "{e}"
    );

    // nvlink -s naming a GPU the matrix lacks.
    let e = facts_from_texts(
        topo,
        Some(&read("v100-sxm2-32gb-8gpu-vast-driver580-nvlink-s.txt")),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(e, NvidiaSmiError::UnknownNvlinkGpu { index: 2 }),
        "{e}"
    );
}

#[test]
fn facts_from_topo_and_nvlink_only() {
    let topo = read("rtx3090-2gpu-nvlink-bridge-nv4-5900x-topo-m.txt");
    let nvlink = read("rtx3090-2gpu-nvlink-bridge-5900x-redacted-uuid-nvlink-s.txt");
    let facts = facts_from_texts(&topo, Some(&nvlink), None).unwrap();
    // The product is known from nvlink -s; the redacted UUID is not taken for one.
    assert_eq!(
        facts.gpus[0].product.as_deref(),
        Some("NVIDIA GeForce RTX 3090")
    );
    assert_eq!(facts.gpus[0].uuid, None);
    assert_eq!(facts.gpus[0].nvlinks.as_ref().map(Vec::len), Some(4));
    assert_eq!(facts.gpu_pairs[0].nvlinks, 4);

    let topo = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n\
                GPU0\t X \tNV4\tPHB\t0-7\nGPU1\tNV4\t X \tPHB\t0-7\nGPU2\tPHB\tPHB\t X \t0-7\n";
    let nvlink = read("rtx-a6000-3gpu-one-nvlink-pair-links-inactive-nvlink-s.txt");
    let facts = facts_from_texts(topo, Some(&nvlink), None).unwrap();
    assert_eq!(facts.gpus[2].nvlinks, Some(vec![]));
    assert_eq!(
        facts.gpus[2].uuid.as_deref(),
        Some("GPU-02c05ee3-bdb5-aac7-f9e8-a4c8f3f725b3")
    );
}

#[test]
fn facts_from_topo_and_text_query() {
    let topo = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-27\t0\t\tN/A\n";
    let query = read("h100-80gb-hbm3-single-gpu-della-driver545-nvidia-smi-a.txt");
    let facts = facts_from_texts(topo, None, Some(&query)).unwrap();
    assert_eq!(facts.driver_version.as_deref(), Some("545.23.08"));
    assert_eq!(facts.cuda_version.as_deref(), Some("12.3"));
    let g = &facts.gpus[0];
    assert_eq!(g.product.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(
        g.uuid.as_deref(),
        Some("GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1")
    );
    assert_eq!(g.memory_mib, Some(81559));
    assert_eq!(g.pci_bus_id.as_deref(), Some("00000000:19:00.0"));
    assert_eq!(g.mig_enabled, Some(false));
    assert_eq!(g.numa_node, Some(0));
    assert_eq!(g.cpu_affinity.as_deref(), Some("0-27"));
    assert_eq!(g.nvlinks, None);
    assert!(facts.gpu_pairs.is_empty());

    // A redacted -q UUID is kept: -q is the source of record for it.
    let query = read("v100-pcie-32gb-driver410-nvidia-smi-q.txt");
    let facts = facts_from_texts(topo, None, Some(&query)).unwrap();
    assert_eq!(
        facts.gpus[0].uuid.as_deref(),
        Some("GPU-4965xxxx-79e3-7941-12cb-1dfe9c53xxxx")
    );
    assert_eq!(facts.cuda_version, None);
}
