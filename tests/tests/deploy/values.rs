//! The releases the tests render and the values files they render with.

/// `helm install gputopo helm/gputopo -n gputopo-system`, as docs/deploy.md says:
/// the names the plain manifests use.
pub(super) const RELEASE: &str = "gputopo";
pub(super) const NAMESPACE: &str = "gputopo-system";

/// Values that change something in every template: what an operator of a
/// cluster with GFD, the GPU Operator's RuntimeClass and Prometheus sets.
pub(super) const NON_DEFAULT_VALUES: &str = r#"
agent:
  gfdCompatibleLabels: false
  runtimeClassName: nvidia
  nodeBoundPolicy: false
  priorityClassName: ""
  nvmlLibrary: /usr/lib64/libnvidia-ml.so.1
  rescanInterval: 5m
  podResources:
    enabled: false
  linkDevices:
    enabled: true
  extraTolerations:
    - key: dedicated
      operator: Equal
      value: gpu
      effect: NoSchedule
  image:
    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
metrics:
  serviceMonitor:
    enabled: true
    labels:
      release: kube-prometheus-stack
scheduler:
  schedulerName: gpu-topology
  replicas: 1
  leaderElection:
    leaseName: gpu-topology-leader
  logJson: true
  priorityClassName: ""
  config:
    networkTiers:
      keys: [example.com/spine, example.com/rack]
    weights:
      gpuSet: 60
    defaultTopologyManagerPolicy: single-numa-node
    backoff:
      max: 10s
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - key: node-role.kubernetes.io/control-plane
                operator: Exists
  tolerations:
    - key: node-role.kubernetes.io/control-plane
      operator: Exists
      effect: NoSchedule
"#;

/// The extender mode, with values the extender mode ignores (replicas) or
/// moves (port, weight, served profiles, TLS Secrets, limits, who may call).
pub(super) const EXTENDER_VALUES: &str = r#"
scheduler:
  replicas: 3
  extender:
    enabled: true
    port: 8888
    weight: 10
    schedulerNames: [gpu-profile, default-scheduler]
    tls:
      secretName: gputopo-extender-tls
      clientCASecretName: kube-scheduler-client-ca
    limits:
      requestTimeout: 20s
      maxConcurrentBinds: 16
    networkPolicy:
      extraFrom:
        - ipBlock:
            cidr: 10.0.0.10/32
      metricsNamespace: prometheus
"#;
